package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/providers"
)

// Nothing Berth makes on an engine outlives its purpose. Every container,
// network and volume carries LabelExpires: the time after which it is
// garbage.
//   - A computer, its network and its volume: the end of its lease plus
//     the grace (COMPUTER_GRACE_SECONDS).
//   - A warm-pool computer and a network holder: the longest they may wait
//     (PoolMaxWait), plus the longest lease (MaxLease), plus the grace. Their makers
//     replace those that waited PoolMaxWait, so a live pool never holds one
//     near its time.
// Labels cannot change after a resource is made, so nothing is renewed:
// each lease is the longest the resource may be needed.
//
// Every Berth process that manages an engine (supervisor, lender, tunnel
// runner, of any deployment) runs a Collector, which removes what is past
// its time. So a process that dies and never comes back leaks nothing for
// longer than the grace; a live resource of another deployment is never
// touched, since its time has not come.

// LabelExpires is the label with the Unix time, in seconds, after which a
// resource is garbage.
const LabelExpires = "dev.berth.expires"

// Shorthands for the limits in package providers.
const (
	PoolMaxWait = providers.PoolMaxWait
	MaxLease    = providers.MaxLease
)

// expiresLabel is the LabelExpires value for a resource made at now that
// is needed for lease.
func (d *Docker) expiresLabel(lease time.Duration) string {
	if lease <= 0 {
		lease = MaxLease
	}
	return strconv.FormatInt(d.opts.Clock.Now().Add(lease+d.opts.Grace).Unix(), 10)
}

// expired reports whether labels carry a LabelExpires before now. A resource
// without the label, or with one that does not parse, is never garbage.
func expired(labels map[string]string, now time.Time) bool {
	v, ok := labels[LabelExpires]
	if !ok {
		return false
	}
	t, err := strconv.ParseInt(v, 10, 64)
	return err == nil && now.Unix() > t
}

// Collector removes the containers, networks and volumes on an engine whose
// LabelExpires has passed, whoever made them.
type Collector struct {
	d   *Docker
	log *slog.Logger
	// deployments, when set, limits the collector to the resources of
	// these deployments: a test's collector, whose clock runs ahead, must
	// leave the rest of a shared engine alone.
	deployments map[string]bool
}

// mine reports whether labels are of a resource the collector may remove.
func (c *Collector) mine(labels map[string]string) bool {
	return c.deployments == nil || c.deployments[labels[providers.LabelDeployment]]
}

// NewCollector returns a Collector of the engine at host (a DOCKER_SOCKET
// value). A nil clock is the real one; a nil logger discards.
func NewCollector(host string, clk clock.Clock, log *slog.Logger) (*Collector, error) {
	d, err := New(Options{Host: host, Clock: clk, Logger: log})
	if err != nil {
		return nil, err
	}
	return &Collector{d: d, log: d.log.With("component", "docker-gc")}, nil
}

// Close releases the engine's connections.
func (c *Collector) Close() error { return c.d.Close() }

// CollectInterval is how often a provider's collector runs: a minute, or
// half the grace when that is shorter (at least a second).
func CollectInterval(grace time.Duration) time.Duration {
	return min(time.Minute, max(grace/2, time.Second))
}

// RunGarbageCollector removes the expired resources of the provider's
// engine, whoever made them, until ctx ends. It implements
// providers.GarbageCollector.
func (d *Docker) RunGarbageCollector(ctx context.Context) {
	c := &Collector{d: d, log: d.log.With("component", "docker-gc")}
	c.Run(ctx, CollectInterval(d.opts.Grace))
}

// Collected counts what one pass removed.
type Collected struct {
	Containers, Networks, Volumes int
}

// Run collects every interval until ctx ends (and once at once).
func (c *Collector) Run(ctx context.Context, interval time.Duration) {
	for {
		n, err := c.Collect(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("remove expired computers", "err", err)
		}
		if n != (Collected{}) {
			c.log.Info("removed expired computers", "containers", n.Containers, "networks", n.Networks, "volumes", n.Volumes)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.d.opts.Clock.After(interval):
		}
	}
}

// Collect removes what has expired: containers first (with their anonymous
// volumes, and a computer's network holder with it; disk helpers too), then
// networks (disconnecting what is still attached), then volumes (a disk
// volume after its loop devices are detached).
func (c *Collector) Collect(ctx context.Context) (Collected, error) {
	cli := c.d.cli
	now := c.d.opts.Clock.Now()
	f := make(client.Filters).Add("label", LabelExpires)
	var n Collected
	var errs []error

	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return n, fmt.Errorf("list containers: %w", err)
	}
	kept, keptNets, err := c.suspended(ctx, cs.Items, now)
	if err != nil {
		// Better to keep everything this pass than to remove a suspended
		// computer's network or home.
		return n, err
	}
	for _, ct := range cs.Items {
		if !expired(ct.Labels, now) || !c.mine(ct.Labels) || kept[computerOf(ct.Names)] {
			continue
		}
		_, err := cli.ContainerRemove(ctx, ct.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			n.Containers++
			if len(ct.Names) > 0 {
				// A computer in a holder's network namespace: the holder
				// and its network go with it.
				if id, ok := strings.CutPrefix(strings.TrimPrefix(ct.Names[0], "/"), ContainerPrefix); ok {
					if err := c.d.removeHolder(ctx, HolderPrefix+id); err != nil {
						errs = append(errs, err)
					}
				}
			}
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "in progress"):
		default:
			errs = append(errs, fmt.Errorf("remove container %s: %w", ct.ID[:12], err))
		}
	}

	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("list networks: %w", err))...)
	}
	for _, nw := range ns.Items {
		if !expired(nw.Labels, now) || !c.mine(nw.Labels) || keptNets[nw.Name] || kept[nw.Labels[providers.LabelComputer]] {
			continue
		}
		if err := c.d.removeNetwork(ctx, nw.ID, nw.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		n.Networks++
	}

	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("list volumes: %w", err))...)
	}
	// Homes before the disk volumes that back them (see quota.go).
	for _, v := range sortDisksLast(vs.Items) {
		if !expired(v.Labels, now) || !c.mine(v.Labels) || kept[v.Labels[providers.LabelComputer]] {
			continue
		}
		if err := c.d.removeVolume(ctx, v, true); err != nil {
			// A volume still in use (its computer or a disk helper is
			// being removed right now, by this process or another) is
			// taken on a later pass.
			if !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "volume is in use") {
				errs = append(errs, err)
			}
			continue
		}
		n.Volumes++
	}
	return n, errors.Join(errs...)
}

// suspended finds, among the expired containers of cs, the computers kept
// past their expiry label because they have a checkpoint (see keptUntil):
// their computer ids, and the names of the networks they need (their own,
// or their network holder's).
func (c *Collector) suspended(ctx context.Context, cs []container.Summary, now time.Time) (kept, nets map[string]bool, err error) {
	kept, nets = map[string]bool{}, map[string]bool{}
	for _, ct := range cs {
		if !expired(ct.Labels, now) || ct.Labels[labelHolder] == "true" {
			continue
		}
		id := computerOf(ct.Names)
		if id == "" {
			continue
		}
		until, ok, err := c.d.keptUntil(ctx, ct.ID)
		if err != nil && !cerrdefs.IsNotFound(err) {
			return nil, nil, fmt.Errorf("read checkpoints of %s: %w", ct.ID[:12], err)
		}
		if !ok || !now.Before(until) {
			continue
		}
		kept[id] = true
		nets[NetworkPrefix+id] = true
	}
	for _, ct := range cs {
		if ct.Labels[labelHolder] == "true" && kept[computerOf(ct.Names)] {
			nets[ct.Labels[labelHolderNetwork]] = true
		}
	}
	return kept, nets, nil
}

// computerOf is the computer id in a computer's or a network holder's
// container name, or "".
func computerOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	name := strings.TrimPrefix(names[0], "/")
	if id, ok := strings.CutPrefix(name, HolderPrefix); ok {
		return id
	}
	id, _ := strings.CutPrefix(name, ContainerPrefix)
	if id == name {
		return ""
	}
	return id
}
