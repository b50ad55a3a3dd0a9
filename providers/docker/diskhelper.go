package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"
)

// The disk quota's privileged steps (quota.go) run in a standing helper:
// a container of the computer's image, started at the first step and kept
// a few minutes, in which each step is an exec. An exec costs the engine
// one process in a running container; a helper container of its own costs
// a create, a start and a removal, which was most of what the quota added
// to a computer's create and destroy (docs/performance.md).
//
// The standing helper has the one-shot helper's limits: root with only
// CAP_SYS_ADMIN, CAP_CHOWN and CAP_DAC_OVERRIDE, of the host's devices only
// the loop devices, no network, a read-only root filesystem, no new
// privileges, and the same fixed scripts whose only inputs are a file in a
// disk volume (named after a computer id the provider checked), a size and
// a user. In place of one disk volume it sees the engine's volume folder,
// where the local driver keeps a volume's files in <folder>/<name>/_data,
// bound without the filesystems mounted below it: it reaches any disk
// volume's file, and no computer's home.
//
// The helper's process is a sleep of helperLife, so it ends by itself and
// a provider that dies leaves it behind for minutes at most; the engine
// removes its container when it ends, and Close removes the ones the
// provider started. Steps go to a helper for helperUse after its start and
// each ends within stepTimeout, so none outlives its helper. A helper gone
// early (removed by hand, the engine restarted) is replaced, once per step.
//
// A disk volume whose mount point does not have the local driver's shape
// gets a helper container of its own (runHelper), as every step did before.

const (
	helperLife  = 10 * time.Minute
	helperUse   = 5 * time.Minute
	stepTimeout = 2 * time.Minute
)

// Limits of a standing helper, which runs the steps of concurrent creates
// and destroys side by side.
var (
	standingMemory int64 = 512 << 20
	standingPids   int64 = 1024
)

// volumesTarget is where a standing helper sees the engine's volume folder.
const volumesTarget = "/volumes"

// standingScript is a standing helper's process: it stops the mounts the
// engine makes in its volume folder (computers' homes) from showing in the
// helper, removes any that showed before, and sleeps for its life ($1
// seconds).
const standingScript = `set -eu
mount --make-rprivate ` + volumesTarget + `
for p in $(cut -d' ' -f5 /proc/self/mountinfo | grep '^` + volumesTarget + `/' || :); do
	umount -l "$p" 2>/dev/null || :
done
exec sleep "$1"
`

// maxStepOutput bounds what a step's output is read to.
const maxStepOutput = 64 << 10

// errHelperGone marks a step that found its standing helper gone before it
// ran.
var errHelperGone = errors.New("the standing disk helper is gone")

// standing is one standing helper.
type standing struct {
	id      string
	folder  string // the engine's volume folder, bound at volumesTarget
	started time.Time
}

// diskHelpers are a provider's standing helpers, one per image.
type diskHelpers struct {
	d *Docker

	mu      sync.Mutex
	byImage map[string]standing
	starts  int  // helpers started
	off     bool // every step gets a helper container of its own (tests)
}

// diskStep runs a disk script (makeScript, releaseScript) for the disk
// volume v with a helper of image: an exec in the standing helper, or a
// helper container of its own when v is not a local driver's volume. The
// script's first argument is v's disk file, args follow. An error that
// wraps errNotStarted means the script never ran.
func (d *Docker) diskStep(ctx context.Context, image string, v volume.Volume, script string, args ...string) (string, error) {
	folder, ok := volumeFolder(v)
	if !ok || d.helpers.isOff() {
		return d.runHelper(ctx, image, v.Name, script, append([]string{diskFile}, args...)...)
	}
	file := path.Join(volumesTarget, v.Name, "_data", path.Base(diskFile))
	return d.helpers.run(ctx, image, folder, script, append([]string{file}, args...))
}

// volumeFolder returns the folder a local driver's volume v lives in, from
// its mount point <folder>/<name>/_data.
func volumeFolder(v volume.Volume) (string, bool) {
	if v.Driver != "" && v.Driver != "local" {
		return "", false
	}
	folder, ok := strings.CutSuffix(v.Mountpoint, "/"+v.Name+"/_data")
	if !ok || !path.IsAbs(folder) || path.Clean(folder) != folder || folder == "/" {
		return "", false
	}
	return folder, true
}

func (h *diskHelpers) isOff() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.off
}

// run runs script in the standing helper of image, started if needed.
func (h *diskHelpers) run(ctx context.Context, image, folder, script string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, err := h.get(ctx, image, folder)
		if err != nil {
			return "", err
		}
		out, err := h.d.execStep(ctx, s.id, script, args)
		if errors.Is(err, errHelperGone) && attempt == 0 {
			h.drop(image, s.id)
			continue
		}
		return out, err
	}
}

// get returns the standing helper of image, starting one when there is
// none, or when the one there is has had its time for new steps.
func (h *diskHelpers) get(ctx context.Context, image, folder string) (standing, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.d.opts.Clock.Now()
	if s, ok := h.byImage[image]; ok && s.folder == folder && now.Sub(s.started) < helperUse {
		return s, nil
	}
	id, err := h.d.startHelper(ctx, image, folder)
	if err != nil {
		return standing{}, err
	}
	// One that had its time ends by itself when its steps are long done.
	if h.byImage == nil {
		h.byImage = make(map[string]standing)
	}
	s := standing{id: id, folder: folder, started: now}
	h.byImage[image] = s
	h.starts++
	return s, nil
}

// drop forgets a helper found gone.
func (h *diskHelpers) drop(image, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byImage[image].id == id {
		delete(h.byImage, image)
	}
}

// close removes the standing helpers.
func (h *diskHelpers) close(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for image, s := range h.byImage {
		if _, err := h.d.cli.ContainerRemove(ctx, s.id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			h.d.log.Warn("remove standing disk helper", "container", s.id, "err", err)
		}
		delete(h.byImage, image)
	}
}

// startHelper starts a standing helper of image that sees the engine's
// volume folder.
func (d *Docker) startHelper(ctx context.Context, image, folder string) (string, error) {
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: helperConfig(image, d.expiresLabel(helperLife),
			[]string{"/bin/sh", "-c", standingScript, "berth-disk", strconv.Itoa(int(helperLife / time.Second))}, nil),
		HostConfig: helperHostConfig(mount.Mount{
			Type: mount.TypeBind, Source: folder, Target: volumesTarget,
			// The engine makes a bind from its own folder a slave of
			// the host's mounts; standingScript cuts that.
			BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRSlave},
		}, standingMemory, &standingPids, true),
	})
	if err != nil {
		return "", fmt.Errorf("create disk helper container from %s: %w (%w)", image, d.engineErr(err), errNotStarted)
	}
	if _, err := d.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, rerr := d.cli.ContainerRemove(rctx, res.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			d.log.Warn("remove disk helper", "container", res.ID, "err", rerr)
		}
		return "", fmt.Errorf("start disk helper container from %s: %w (%w)", image, d.engineErr(err), errNotStarted)
	}
	return res.ID, nil
}

// execStep runs script with args as an exec in the helper id and returns
// its output (at most maxStepOutput), or an error with the output when it
// exits with another code than 0.
func (d *Docker) execStep(ctx context.Context, id, script string, args []string) (string, error) {
	gone := func(err error) bool { return cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) }
	x, err := d.cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		User:         "0:0",
		TTY:          true, // one plain output stream
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          append([]string{"/bin/sh", "-c", script, "berth-disk"}, args...),
	})
	if gone(err) {
		return "", fmt.Errorf("run a step in disk helper %s: %w (%w, %w)", id, d.engineErr(err), errHelperGone, errNotStarted)
	}
	if err != nil {
		return "", fmt.Errorf("run a step in disk helper %s: %w (%w)", id, d.engineErr(err), errNotStarted)
	}
	att, err := d.cli.ExecAttach(ctx, x.ID, client.ExecAttachOptions{TTY: true})
	if gone(err) {
		return "", fmt.Errorf("run a step in disk helper %s: %w (%w, %w)", id, d.engineErr(err), errHelperGone, errNotStarted)
	}
	if err != nil {
		return "", fmt.Errorf("run a step in disk helper %s: %w", id, d.engineErr(err))
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(att.Reader, maxStepOutput)); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return "", fmt.Errorf("read the disk helper's output: %w", err)
	}
	code, pid, err := d.execExit(ctx, x.ID)
	if err != nil {
		return "", err
	}
	if code != 0 && pid == 0 {
		// The engine could not start the shell (an image without one).
		return "", fmt.Errorf("run a step in disk helper %s: %s (%w)", id, strings.TrimSpace(b.String()), errNotStarted)
	}
	if code != 0 {
		return "", fmt.Errorf("disk helper step exited with %d: %s", code, strings.TrimSpace(b.String()))
	}
	return b.String(), nil
}

// execExit waits for an exec whose output has ended to be seen as done by
// the engine, and returns its exit code and its process id (0 when the
// engine could not start it).
func (d *Docker) execExit(ctx context.Context, execID string) (code, pid int, err error) {
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		res, err := d.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return 0, 0, fmt.Errorf("read the disk helper step's exit: %w", d.engineErr(err))
		}
		if !res.Running {
			return res.ExitCode, res.PID, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("read the disk helper step's exit: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// helperConfig is the container config of a disk helper of image.
func helperConfig(image, expires string, entrypoint, cmd []string) *container.Config {
	return &container.Config{
		Image:           image,
		User:            "0:0",
		Entrypoint:      entrypoint,
		Cmd:             cmd,
		Env:             []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Tty:             true, // one plain output stream
		NetworkDisabled: true,
		Labels: map[string]string{
			labelDiskHelper: "true",
			LabelExpires:    expires,
		},
	}
}

// helperHostConfig is the host config of a disk helper that sees disks at
// the mount disks.
func helperHostConfig(disks mount.Mount, memory int64, pids *int64, autoRemove bool) *container.HostConfig {
	return &container.HostConfig{
		AutoRemove:     autoRemove,
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/m": "size=1m,mode=0700"},
		CapDrop:        []string{"ALL"},
		CapAdd:         []string{"SYS_ADMIN", "CHOWN", "DAC_OVERRIDE"},
		SecurityOpt:    []string{"no-new-privileges"},
		LogConfig:      logConfig(),
		Mounts: []mount.Mount{
			disks,
			// The host's /dev, where the kernel adds loop devices as
			// they are made; the device rules let only loop devices
			// (block major 7) and /dev/loop-control be opened.
			{Type: mount.TypeBind, Source: "/dev", Target: "/dev"},
		},
		Resources: container.Resources{
			DeviceCgroupRules: []string{"b 7:* rwm", "c 10:237 rwm"},
			Memory:            memory,
			MemorySwap:        memory,
			PidsLimit:         pids,
		},
	}
}
