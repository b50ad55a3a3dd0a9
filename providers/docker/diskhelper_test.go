package docker

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/providers"
)

// standingHelper returns the id of the provider's standing helper of the
// test image, and how many it has started.
func standingHelper(d *Docker) (string, int) {
	d.helpers.mu.Lock()
	defer d.helpers.mu.Unlock()
	return d.helpers.byImage[testImage].id, d.helpers.starts
}

// TestStandingHelperServesConcurrentCreates: computers made at once get
// their disks from one standing helper, each its own filesystem and loop
// device, owned by the computer's user; destroying them releases every
// disk.
func TestStandingHelperServesConcurrentCreates(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	d := newTestDocker(t, ctx, Options{DiskMB: 32})
	root := hostDocker(t, ctx, d)
	const n = 5
	specs := make([]providers.Spec, n)
	machines := make([]providers.Machine, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range specs {
		specs[i] = testSpec(t)
		t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			d.Destroy(ctx, ContainerPrefix+specs[i].ComputerID)
		})
		wg.Go(func() { machines[i], errs[i] = d.Create(ctx, specs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if id, starts := standingHelper(d); id == "" || starts != 1 {
		t.Errorf("standing helper %q, %d started; want one for all %d creates", id, starts, n)
	}
	devs := map[string]bool{}
	type disk struct{ uuid, file string }
	disks := make([]disk, n)
	for i, m := range machines {
		dev, uuid, file := diskOf(t, ctx, d, root, specs[i].ComputerID)
		if devs[dev] {
			t.Errorf("loop device %s backs two homes", dev)
		}
		devs[dev] = true
		disks[i] = disk{uuid, file}
		if got := mustRun(t, ctx, d, m.ID, "stat -c %u:%g /home/berth && ls -A /home/berth && echo ok > /home/berth/f && cat /home/berth/f"); got != "1000:1000\nok" {
			t.Errorf("home of %s: %q, want owned by 1000:1000, empty, writable", m.ID, got)
		}
	}
	for i, m := range machines {
		if err := d.Destroy(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		requireGone(t, ctx, d, specs[i].ComputerID)
		requireReleased(t, disks[i].uuid, disks[i].file)
	}
}

// TestStandingHelperWalls: the standing helper sees the disk volumes'
// files, never a computer's home, and has the one-shot helper's limits.
func TestStandingHelperWalls(t *testing.T) {
	c := newDiskComputer(t)
	ctx, d, spec, m := c.ctx, c.d, c.spec, c.m
	mustRun(t, ctx, d, m.ID, "echo private > /home/berth/secret")
	id, _ := standingHelper(d)
	if id == "" {
		t.Fatal("no standing helper after a create with a disk quota")
	}
	home := volumesTarget + "/" + namesOf(spec.ComputerID).volume + "/_data"
	if got := mustRun(t, ctx, d, id, "ls -A "+home+"; ls "+volumesTarget+"/"+DiskPrefix+spec.ComputerID+"/_data"); got != "disk.img\ntype" {
		t.Errorf("the helper sees %q in the home's folder and the disk's, want only the disk's file and type", got)
	}
	ins, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	if !hc.AutoRemove || !hc.ReadonlyRootfs || hc.NetworkMode != "none" || !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges") {
		t.Errorf("host config: auto-remove %v, read-only %v, network %q, security %v", hc.AutoRemove, hc.ReadonlyRootfs, hc.NetworkMode, hc.SecurityOpt)
	}
	caps := slices.Sorted(slices.Values(hc.CapAdd))
	if strings.Join(hc.CapDrop, ",") != "ALL" || strings.Join(caps, ",") != "CAP_CHOWN,CAP_DAC_OVERRIDE,CAP_SYS_ADMIN" {
		t.Errorf("capabilities: drop %v, add %v", hc.CapDrop, hc.CapAdd)
	}
	if got := mustRun(t, ctx, d, id, `tr '\0' ' ' </proc/1/cmdline`); got != "sleep 600" {
		t.Errorf("the helper runs %q, want a sleep of its life (600 s)", got)
	}
	if out, code := run(t, ctx, d, id, "ls /dev/sda /dev/vda /dev/nvme0n1 2>/dev/null | head -n 1 | xargs -r head -c 1"); code == 0 && out != "" {
		t.Errorf("the helper read a disk other than a loop device: %q", out)
	}
}

// TestStandingHelperEndsWithClose: closing the provider removes its
// standing helper.
func TestStandingHelperEndsWithClose(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{DiskMB: 16})
	spec := testSpec(t)
	m, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	id, _ := standingHelper(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(client.WithHost(d.opts.Host))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the standing helper %s is still there after Close (inspect: %v)", id, err)
	}
}

// TestStandingHelperReplacedWhenGone: a standing helper removed behind the
// provider's back is replaced by the next step.
func TestStandingHelperReplacedWhenGone(t *testing.T) {
	c := newDiskComputer(t)
	ctx, d := c.ctx, c.d
	id, _ := standingHelper(d)
	if _, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	root := hostDocker(t, ctx, d)
	spec := testSpec(t)
	m := create(t, ctx, d, spec)
	_, uuid, file := diskOf(t, ctx, d, root, spec.ComputerID)
	if id2, starts := standingHelper(d); id2 == id || starts != 2 {
		t.Errorf("helper %s after %s was removed, %d started; want a new one", id2, id, starts)
	}
	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	requireReleased(t, uuid, file)
}

// TestOneShotHelper: with a helper container per step (the way for a disk
// volume that is not in the engine's volume folder), the quota is made,
// holds, and is released the same.
func TestOneShotHelper(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{DiskMB: 16})
	d.helpers.off = true
	root := hostDocker(t, ctx, d)
	spec := testSpec(t)
	m := create(t, ctx, d, spec)
	_, uuid, file := diskOf(t, ctx, d, root, spec.ComputerID)
	if out, code := run(t, ctx, d, m.ID, "dd if=/dev/zero of=/home/berth/big bs=1M count=64"); code == 0 || !strings.Contains(out, "No space left on device") {
		t.Errorf("64 MB written under a 16 MB quota: exit %d: %s", code, out)
	}
	if id, starts := standingHelper(d); id != "" || starts != 0 {
		t.Errorf("a standing helper %q started (%d) with standing helpers off", id, starts)
	}
	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
	requireReleased(t, uuid, file)
}

// TestVolumeFolder: only a local driver's volume in <folder>/<name>/_data
// is reached through the engine's volume folder.
func TestVolumeFolder(t *testing.T) {
	for _, c := range []struct {
		v      volume.Volume
		folder string
	}{
		{volume.Volume{Name: "berth-d-x", Driver: "local", Mountpoint: "/var/lib/docker/volumes/berth-d-x/_data"}, "/var/lib/docker/volumes"},
		{volume.Volume{Name: "berth-d-x", Mountpoint: "/home/u/.local/share/docker/volumes/berth-d-x/_data"}, "/home/u/.local/share/docker/volumes"},
		{volume.Volume{Name: "berth-d-x", Driver: "nfs", Mountpoint: "/var/lib/docker/volumes/berth-d-x/_data"}, ""},
		{volume.Volume{Name: "berth-d-x", Driver: "local", Mountpoint: "/var/lib/docker/volumes/berth-d-y/_data"}, ""},
		{volume.Volume{Name: "berth-d-x", Driver: "local", Mountpoint: "/berth-d-x/_data"}, ""},
		{volume.Volume{Name: "berth-d-x", Driver: "local", Mountpoint: "volumes/berth-d-x/_data"}, ""},
		{volume.Volume{Name: "berth-d-x", Driver: "local", Mountpoint: "/a/../b/berth-d-x/_data"}, ""},
		{volume.Volume{Name: "berth-d-x", Driver: "local"}, ""},
	} {
		folder, ok := volumeFolder(c.v)
		if folder != c.folder || ok != (c.folder != "") {
			t.Errorf("volumeFolder(%s, %q, %q) = %q, %v; want %q", c.v.Name, c.v.Driver, c.v.Mountpoint, folder, ok, c.folder)
		}
	}
}
