package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

// The warm pool. A start on a cold engine costs most of a second, nearly
// all of it the runtime starting the container; only a computer started
// ahead of time beats that. The supervisor keeps WarmPool headless
// computers waiting (supervisor/pool.go): each fully hardened, in its own
// network and with its own volume, started, and unbound: computerd knows
// only the SHA-256 of a one-time bind secret that lives in the memory of
// the supervisor that made it. A start claims one in the store and binds
// it to the session with one call; a used computer is destroyed with its
// session and never waits again.
//
// Pool computers are machines like any other (named berth-c-<id>, with the
// dev.berth.* labels), plus dev.berth.pool=true, and have no session or
// agent label: labels cannot change after a container is made, so the
// store records which session claimed which computer.

// PoolRange is how many computers of image the warm pools keep waiting:
// headless ones at least WARM_POOL_SIZE (or WARM_POOL_MIN), up to
// WARM_POOL_MAX as demand asks; desktop ones WARM_POOL_DESKTOP.
func (d *Docker) PoolRange(image string) (lo, hi int) {
	switch image {
	case "", providers.ImageHeadless:
		return d.opts.WarmPool, max(d.opts.WarmPoolMax, d.opts.WarmPool)
	case providers.ImageDesktop:
		return d.opts.WarmPoolDesktop, d.opts.WarmPoolDesktop
	}
	return 0, 0
}

// CreatePooled starts a computer of spec.Image (headless or desktop) that
// waits unbound for the holder of the bind secret whose hex SHA-256 is
// bindHash. spec names the computer, its attempt and deployment; its
// session, agent and token hash are left empty, for the bind to give. A
// headless computer starts with no environment; a desktop one with
// spec.Env, the supervisor-wide settings its screen reads when it starts
// (the TURN relay), and the bind gives its commands the rest.
func (d *Docker) CreatePooled(ctx context.Context, spec providers.Spec, bindHash string) (providers.Machine, error) {
	if !computerID.MatchString(spec.ComputerID) {
		return providers.Machine{}, fmt.Errorf("create pooled computer: computer id %q: want 1 to 128 letters, digits, '_', '.' or '-'", spec.ComputerID)
	}
	if !tokenHash.MatchString(bindHash) {
		return providers.Machine{}, errors.New("create pooled computer: bind hash: want the hex SHA-256 of the bind secret (64 lowercase hex digits)")
	}
	image, err := d.image(spec.Image)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create pooled computer %s: %w", spec.ComputerID, err)
	}
	if spec.AttemptID == "" {
		spec.AttemptID = newAttemptID()
	}
	env := map[string]string{}
	if spec.Image == providers.ImageDesktop {
		maps.Copy(env, spec.Env)
		delete(env, computerd.EnvTokenHash) // only the bind gives a token
	} else {
		spec.Image = providers.ImageHeadless
	}
	env[computerd.EnvBindHash] = bindHash
	spec.SessionID, spec.AgentID, spec.TokenHash, spec.Env = "", "", "", env
	labels := spec.Labels()
	labels[providers.LabelPool] = "true"
	labels[LabelExpires] = d.expiresLabel(PoolMaxWait + MaxLease)
	start := time.Now()
	m, err := d.create(ctx, spec, image, labels)
	if err != nil {
		d.cleanup(ctx, spec.ComputerID, spec.AttemptID)
		return providers.Machine{}, fmt.Errorf("create pooled computer %s: %w", spec.ComputerID, err)
	}
	d.log.Info("pooled computer started", "computer", spec.ComputerID, "image", spec.Image, "endpoint", m.Endpoint,
		"took", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// MemInfo reports the host's available and total memory, which the pool
// checks before it grows (Options.MemInfo).
func (d *Docker) MemInfo() (available, total uint64, err error) { return d.opts.MemInfo() }

// hostMemInfo reads MemAvailable and MemTotal from /proc/meminfo.
func hostMemInfo() (available, total uint64, err error) {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("read host memory: %w", err)
	}
	return parseMemInfo(raw)
}

// parseMemInfo reads MemAvailable and MemTotal (kB) from /proc/meminfo's text.
func parseMemInfo(raw []byte) (available, total uint64, err error) {
	var haveAvail, haveTotal bool
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, perr := strconv.ParseUint(f[1], 10, 64)
		if perr != nil {
			continue
		}
		switch f[0] {
		case "MemAvailable:":
			available, haveAvail = v<<10, true
		case "MemTotal:":
			total, haveTotal = v<<10, true
		}
	}
	if !haveAvail || !haveTotal || total == 0 {
		return 0, 0, errors.New("read host memory: /proc/meminfo has no MemAvailable and MemTotal")
	}
	return available, total, nil
}
