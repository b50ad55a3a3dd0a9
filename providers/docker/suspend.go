package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/providers"
)

// Suspended computers (persistence "memory"). Under gVisor the engine can
// checkpoint a container: runsc writes the sandbox's memory, its processes
// and its open files to disk and the container stops. Suspend does that
// and keeps the container, its home volume and its network; Resume starts
// it again from the checkpoint, with every process where it was. A
// suspended computer uses no CPU or memory, only the host's disk: the
// container's layer, its home and the checkpoint (about the memory the
// computer used).
//
// The checkpoint is kept inside the container's own folder of the engine
// (the engine's default checkpoint folder), so removing the container
// removes it. It is kept after a resume too: a container with a
// checkpoint called CheckpointName is one of these, which tells the
// garbage collector that its expiry label, written when it was first
// created, no longer says how long it is needed (see keptUntil).

// CheckpointName is the name of the checkpoint Suspend makes.
const CheckpointName = "berth"

// MaxSuspend is how long a suspended computer is kept before the garbage
// collector removes it as if it had expired; the supervisor then wakes the
// agent's computer from its home archive, without its processes.
const MaxSuspend = 30 * 24 * time.Hour

// suspendTimeout bounds a checkpoint and a restore: runsc writes or reads
// the computer's memory (at most MEMORY_MB).
const suspendTimeout = 5 * time.Minute

// ErrNoCheckpoints: this engine cannot checkpoint computers.
var ErrNoCheckpoints = errors.New("the engine cannot checkpoint computers")

// CanSuspend implements providers.Suspender: computers can be suspended
// when they run under gVisor (a runtime named runsc, or runsc-<platform>
// as gVisor's docs register them) and the engine has checkpoints turned on
// (dockerd --experimental).
func (d *Docker) CanSuspend(ctx context.Context) error {
	c, err := d.Runtime(ctx)
	if err != nil {
		return err
	}
	switch {
	case !strings.HasPrefix(c.Name, DetectedRuntime): // runsc, runsc-kvm, ...
		return fmt.Errorf("%w: computers run under %s, and only gVisor (%s) checkpoints a running computer (register runsc with the engine, see docs/persistence.md)", ErrNoCheckpoints, c.Name, DetectedRuntime)
	case !c.Checkpoints:
		return fmt.Errorf("%w: the engine's checkpoints are off (start dockerd with --experimental, or \"experimental\": true in its daemon.json)", ErrNoCheckpoints)
	}
	return nil
}

// Suspend implements providers.Suspender: it checkpoints the computer and
// stops it. A computer already suspended stays so.
func (d *Docker) Suspend(ctx context.Context, machineID string) error {
	if err := d.CanSuspend(ctx); err != nil {
		return fmt.Errorf("suspend computer %s: %w", machineID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, suspendTimeout)
	defer cancel()
	c, err := d.inspectManaged(ctx, machineID)
	if err != nil {
		return fmt.Errorf("suspend computer %s: %w", machineID, err)
	}
	has, err := d.hasCheckpoint(ctx, c.ID)
	if err != nil {
		return fmt.Errorf("suspend computer %s: %w", machineID, err)
	}
	if c.State != nil && !c.State.Running {
		if has {
			return nil // suspended before
		}
		return fmt.Errorf("suspend computer %s: it is %s, not running", machineID, c.State.Status)
	}
	if has {
		// The one its last resume came from.
		if _, err := d.cli.CheckpointRemove(ctx, c.ID, client.CheckpointRemoveOptions{CheckpointID: CheckpointName}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("suspend computer %s: remove its earlier checkpoint: %w", machineID, d.engineErr(err))
		}
	}
	start := time.Now()
	if _, err := d.cli.CheckpointCreate(ctx, c.ID, client.CheckpointCreateOptions{CheckpointID: CheckpointName, Exit: true}); err != nil {
		return fmt.Errorf("suspend computer %s: checkpoint: %w", machineID, d.engineErr(err))
	}
	// The engine answers before it records that the container stopped.
	if err := d.waitRunning(ctx, c.ID, false); err != nil {
		return fmt.Errorf("suspend computer %s: %w", machineID, err)
	}
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsContainer() {
		// Its network holder waits stopped too (Resume restarts it).
		timeout := 0
		id := c.Config.Labels[providers.LabelComputer]
		if _, err := d.cli.ContainerStop(ctx, HolderPrefix+id, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
			d.log.Warn("stop the network holder of a suspended computer", "machine", machineID, "err", d.engineErr(err))
		}
	}
	d.log.Info("computer suspended", "machine", machineID, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// Resume implements providers.Suspender: it starts a suspended computer
// from its checkpoint. A computer that is gone, or has no checkpoint, is
// providers.ErrNotFound.
func (d *Docker) Resume(ctx context.Context, machineID string) (providers.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, suspendTimeout)
	defer cancel()
	c, err := d.inspectManaged(ctx, machineID)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("resume computer %s: %w", machineID, err)
	}
	has, err := d.hasCheckpoint(ctx, c.ID)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("resume computer %s: %w", machineID, err)
	}
	if !has || c.State == nil || c.State.Running {
		return providers.Machine{}, fmt.Errorf("resume computer %s: %w: it is not suspended", machineID, providers.ErrNotFound)
	}
	if err := d.sameImage(ctx, c); err != nil {
		return providers.Machine{}, fmt.Errorf("resume computer %s: %w", machineID, err)
	}
	start := time.Now()
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsContainer() {
		// gVisor took the holder's addresses into its own network stack
		// when the computer first started; restarted, the holder has them
		// on its interface again for the restored computer to take.
		id := c.Config.Labels[providers.LabelComputer]
		if _, err := d.cli.ContainerRestart(ctx, HolderPrefix+id, client.ContainerRestartOptions{}); err != nil {
			return providers.Machine{}, fmt.Errorf("resume computer %s: restart its network holder: %w", machineID, d.engineErr(err))
		}
	}
	if err := d.restore(ctx, c.ID); err != nil {
		return providers.Machine{}, fmt.Errorf("resume computer %s: restore: %w", machineID, err)
	}
	m, err := d.machine(ctx, machineID)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("resume computer %s: %w", machineID, err)
	}
	d.log.Info("computer resumed", "machine", machineID, "endpoint", m.Endpoint, "took", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// stateTimeout bounds the wait for the engine to record that a container
// stopped at its checkpoint or runs after its restore.
const stateTimeout = 30 * time.Second

// restoreTries bounds the starts from a checkpoint that the engine
// refuses because the content it uploads is already in containerd's store:
// the engine's checkpoint leaves that content behind for a moment after it
// answers (moby/moby#42900, seen on Docker 20.10 about once in ten quick
// suspend and resume rounds).
const restoreTries = 5

// restore starts container id from its checkpoint and waits until the
// engine says it runs.
func (d *Docker) restore(ctx context.Context, id string) error {
	var err error
	for try := 1; try <= restoreTries; try++ {
		_, err = d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{CheckpointID: CheckpointName})
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
	if err != nil {
		return d.engineErr(err)
	}
	return d.waitRunning(ctx, id, true)
}

// waitRunning waits until the engine says container id runs (running) or
// no longer runs: it answers a checkpoint or a start before it records the
// change.
func (d *Docker) waitRunning(ctx context.Context, id string, running bool) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		res, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return fmt.Errorf("inspect container %s: %w", id, d.engineErr(err))
		}
		st := res.Container.State
		if st != nil && st.Running == running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for container %s (running %v): %w", id, running, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// sameImage checks that suspended container c runs the image its kind is
// configured with now: a computer wakes on the current image, so one made
// on an image that has moved on is not resumed (providers.ErrNotFound).
func (d *Docker) sameImage(ctx context.Context, c container.InspectResponse) error {
	ref := c.Config.Image
	if ref != d.opts.HeadlessImage && ref != d.opts.DesktopImage {
		return fmt.Errorf("%w: it was made on image %s, which is no longer configured", providers.ErrNotFound, ref)
	}
	img, err := d.cli.ImageInspect(ctx, ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", ref, d.engineErr(err))
	}
	if err != nil || img.ID != c.Image {
		return fmt.Errorf("%w: image %s changed since it was suspended", providers.ErrNotFound, ref)
	}
	return nil
}

// inspectManaged inspects one of Berth's containers; a missing one is
// providers.ErrNotFound.
func (d *Docker) inspectManaged(ctx context.Context, ref string) (container.InspectResponse, error) {
	res, err := d.cli.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return container.InspectResponse{}, fmt.Errorf("%w: no container %s", providers.ErrNotFound, ref)
	}
	if err != nil {
		return container.InspectResponse{}, fmt.Errorf("inspect container %s: %w", ref, d.engineErr(err))
	}
	if res.Container.Config == nil || res.Container.Config.Labels[providers.LabelManaged] != "true" {
		return container.InspectResponse{}, fmt.Errorf("%w: %s", ErrNotManaged, ref)
	}
	return res.Container, nil
}

// hasCheckpoint reports whether container id has the checkpoint Suspend
// makes. An engine without checkpoints has none.
func (d *Docker) hasCheckpoint(ctx context.Context, id string) (bool, error) {
	res, err := d.cli.CheckpointList(ctx, id, client.CheckpointListOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "No such container") {
			return false, nil // an engine without the checkpoint API
		}
		return false, fmt.Errorf("list checkpoints of %s: %w", id, d.engineErr(err))
	}
	for _, c := range res.Items {
		if c.Name == CheckpointName {
			return true, nil
		}
	}
	return false, nil
}

// machine reads back a running computer as the supervisor reaches it: its
// address on its own network, or on its network holder's.
func (d *Docker) machine(ctx context.Context, machineID string) (providers.Machine, error) {
	c, err := d.inspectManaged(ctx, machineID)
	if err != nil {
		return providers.Machine{}, err
	}
	labels := berthLabels(c.Config.Labels)
	id := labels[providers.LabelComputer]
	ns := c.NetworkSettings
	if ns != nil {
		if ep := ns.Networks[NetworkPrefix+id]; ep != nil && ep.IPAddress.IsValid() {
			return providers.Machine{ID: machineID, Endpoint: endpoint(ep.IPAddress), Labels: labels}, nil
		}
	}
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsContainer() {
		h, err := d.cli.ContainerInspect(ctx, HolderPrefix+id, client.ContainerInspectOptions{})
		if err != nil {
			return providers.Machine{}, fmt.Errorf("inspect the network holder of %s: %w", machineID, d.engineErr(err))
		}
		if hs := h.Container.NetworkSettings; hs != nil {
			for _, ep := range hs.Networks {
				if ep != nil && ep.IPAddress.IsValid() {
					return providers.Machine{ID: machineID, Endpoint: endpoint(ep.IPAddress), Labels: labels}, nil
				}
			}
		}
	}
	return providers.Machine{}, fmt.Errorf("container %s has no address", machineID)
}

// keptUntil is how long the garbage collector leaves a computer that has
// a checkpoint, whatever its expiry label says: MaxSuspend after it was
// suspended, or a lease's length (MaxLease) plus grace after it was last
// resumed. ok is false for a container without a checkpoint.
func (d *Docker) keptUntil(ctx context.Context, id string) (until time.Time, ok bool, err error) {
	has, err := d.hasCheckpoint(ctx, id)
	if err != nil || !has {
		return time.Time{}, false, err
	}
	res, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return time.Time{}, false, d.engineErr(err)
	}
	st := res.Container.State
	if st == nil {
		return time.Time{}, false, nil
	}
	if st.Running {
		t, _ := time.Parse(time.RFC3339Nano, st.StartedAt)
		return t.Add(MaxLease + d.opts.Grace), true, nil
	}
	t, _ := time.Parse(time.RFC3339Nano, st.FinishedAt)
	return t.Add(MaxSuspend), true, nil
}

var _ providers.Suspender = (*Docker)(nil)
