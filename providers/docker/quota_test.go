package docker

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/providers"
)

// diskComputer is a computer with a 32 MiB disk on a provider of its own.
type diskComputer struct {
	ctx  context.Context // the test's
	d    *Docker
	root string // the engine's root folder
	spec providers.Spec
	m    providers.Machine
	// dev, uuid and file are the disk's loop device, filesystem UUID and
	// backing file.
	dev, uuid, file string
}

// newDiskComputer starts a diskComputer on the engine's host, or skips the
// test.
func newDiskComputer(t *testing.T) diskComputer {
	t.Helper()
	c := diskComputer{ctx: testContext(t, 2*time.Minute)}
	c.d = newTestDocker(t, c.ctx, Options{DiskMB: 32})
	c.root = hostDocker(t, c.ctx, c.d)
	c.spec = testSpec(t)
	c.m = create(t, c.ctx, c.d, c.spec)
	c.dev, c.uuid, c.file = diskOf(t, c.ctx, c.d, c.root, c.spec.ComputerID)
	return c
}

// hostDocker returns the engine's root folder when the test runs on the
// engine's host (so that it can look at its disk and loop devices), or
// skips the test.
func hostDocker(t *testing.T, ctx context.Context, d *Docker) string {
	t.Helper()
	info, err := d.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	root := info.Info.DockerRootDir
	if _, err := os.Stat(filepath.Join(root, "volumes")); err != nil {
		t.Skipf("the engine's folder %s is not on this host: %v", root, err)
	}
	if _, err := os.Stat("/sys/block"); err != nil {
		t.Skipf("no /sys/block: %v", err)
	}
	return root
}

// freeBytes is the space free to root on the filesystem of path.
func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bfree) * st.Bsize
}

// fsUUID reads the UUID of the ext2/3/4 filesystem in a file or device, as
// the helper scripts do.
func fsUUID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, 16)
	if _, err := f.ReadAt(b, 1128); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// loopsOf lists the host's loop devices that back a filesystem with uuid.
func loopsOf(t *testing.T, uuid string) []string {
	t.Helper()
	ms, err := filepath.Glob("/sys/block/loop*/loop")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		dev := "/dev/" + filepath.Base(filepath.Dir(m))
		if u, err := fsUUID(dev); err == nil && u == uuid {
			out = append(out, dev)
		}
	}
	return out
}

// diskOf returns the device of a computer's home volume and the UUID of
// its filesystem, read from the disk volume's file on the host.
func diskOf(t *testing.T, ctx context.Context, d *Docker, root, computerID string) (device, uuid, file string) {
	t.Helper()
	v, err := d.cli.VolumeInspect(ctx, namesOf(computerID).volume, client.VolumeInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	device = v.Volume.Options["device"]
	if !strings.HasPrefix(device, "/dev/loop") {
		t.Fatalf("home volume options %v, want a loop device", v.Volume.Options)
	}
	file = filepath.Join(root, "volumes", DiskPrefix+computerID, "_data", "disk.img")
	uuid, err = fsUUID(file)
	if err != nil {
		t.Fatal(err)
	}
	if loops := loopsOf(t, uuid); len(loops) != 1 || loops[0] != device {
		t.Fatalf("loop devices of the disk: %v, want [%s]", loops, device)
	}
	return device, uuid, file
}

// requireReleased fails unless no loop device backs the filesystem and its
// file is gone.
func requireReleased(t *testing.T, uuid, file string) {
	t.Helper()
	if loops := loopsOf(t, uuid); len(loops) != 0 {
		t.Errorf("loop devices left: %v", loops)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("disk file %s left (stat: %v)", file, err)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(file))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("disk volume %s left (stat: %v)", filepath.Dir(filepath.Dir(file)), err)
	}
}

// TestDiskQuotaHolds writes past a computer's disk quota: the write fails
// with ENOSPC, the host's disk loses no more than the quota (the disk file
// holds at most the quota, and the container's own layer next to nothing),
// and destroying the computer leaves no loop device, file or volume behind.
func TestDiskQuotaHolds(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const quotaMB = 64
	d := newTestDocker(t, ctx, Options{DiskMB: quotaMB})
	root := hostDocker(t, ctx, d)
	spec := testSpec(t)
	before := freeBytes(t, root)
	m := create(t, ctx, d, spec)
	_, uuid, file := diskOf(t, ctx, d, root, spec.ComputerID)

	if got := mustRun(t, ctx, d, m.ID, "stat -c %u:%g /home/berth && ls -A /home/berth"); got != "1000:1000" {
		t.Errorf("home owner and contents: %q, want 1000:1000 and nothing", got)
	}
	// gVisor shows the home as its own file proxy's mount, without the
	// host mount's flags; no-new-privileges and no capabilities keep
	// setuid files and devices useless there all the same.
	if mnt := mustRun(t, ctx, d, m.ID, "grep ' /home/berth ' /proc/mounts"); !underGVisor(t, ctx, d) && (!strings.Contains(mnt, "nosuid") || !strings.Contains(mnt, "nodev")) {
		t.Errorf("home mounted %q, want nosuid and nodev", mnt)
	}
	out, code := run(t, ctx, d, m.ID, "dd if=/dev/zero of=/home/berth/big bs=1M count=1024 && sync")
	if code == 0 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("1 GB written under a %d MB quota: exit %d: %s", quotaMB, code, out)
	}
	written := mustRun(t, ctx, d, m.ID, "du -m /home/berth/big | cut -f1")
	t.Logf("the write stopped at %s MB: %s", written, strings.TrimSpace(out))
	// Sparse: the disk file holds what the computer wrote, and no more.
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	if held := st.Blocks * 512; held > quotaMB<<20 {
		t.Errorf("the disk file holds %d MB of the host's disk for a %d MB quota", held>>20, quotaMB)
	}
	// And nothing of the write went around the disk: the container's own
	// writable layer holds next to nothing. (The host's free space is only
	// logged: other tests on the machine write gigabytes meanwhile.)
	ci, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{Size: true})
	if err != nil {
		t.Fatal(err)
	}
	if rw := ci.Container.SizeRw; rw == nil || *rw > 16<<20 {
		t.Errorf("the container's writable layer holds %v bytes, want the write confined to the disk", rw)
	}
	t.Logf("the host's disk lost %d MB meanwhile", (before-freeBytes(t, root))>>20)
	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
	requireReleased(t, uuid, file)
}

// TestDiskQuotaCannotBeMade: when the helper cannot make the filesystem
// (here, in an image without /bin/sh), creating a computer fails naming the
// setting, and leaves nothing behind.
func TestDiskQuotaCannotBeMade(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const bare = "berth/provider-test:no-mkfs"
	d := newTestDocker(t, ctx, Options{DiskMB: 32, HeadlessImage: bare})
	c, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Image:  testImage,
		Config: &container.Config{User: "0:0", Cmd: []string{"rm", "/bin/sh"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, client.ContainerRemoveOptions{Force: true})
	wait := d.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := d.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-wait.Result:
		if r.StatusCode != 0 {
			t.Fatalf("rm exited %d", r.StatusCode)
		}
	case err := <-wait.Error:
		t.Fatal(err)
	}
	if _, err := d.cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{
		Reference: bare,
		Changes:   []string{`CMD ["/bin/sleep", "1000000"]`},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.cli.ImageRemove(ctx, bare, client.ImageRemoveOptions{Force: true})
	})

	spec := testSpec(t)
	_, err = d.Create(ctx, spec)
	if err == nil {
		d.Destroy(ctx, ContainerPrefix+spec.ComputerID)
		t.Fatal("a computer was made without its disk quota")
	}
	for _, want := range []string{SettingDiskMB + "=32", SettingDiskMB + "=0 turns it off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	t.Log(err)
	requireGone(t, ctx, d, spec.ComputerID)
}

// TestCollectorReleasesDisks: the garbage collector removes an expired
// computer's disk too, loop device and file.
func TestCollectorReleasesDisks(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	clk := clock.NewFake(time.Now())
	d := newTestDocker(t, ctx, Options{Grace: 5 * time.Second, Clock: clk, DiskMB: 32})
	root := hostDocker(t, ctx, d)
	spec := testSpec(t)
	spec.Deployment = "gone-" + randomID(t)
	spec.Lease = time.Minute
	create(t, ctx, d, spec)
	_, uuid, file := diskOf(t, ctx, d, root, spec.ComputerID)

	gc, err := NewCollector(d.opts.Host, clk, d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	gc.deployments = map[string]bool{spec.Deployment: true}
	clk.Advance(time.Minute + 6*time.Second)
	n, err := gc.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Volumes < 2 {
		t.Errorf("collected %+v, want the home and the disk volume", n)
	}
	requireGone(t, ctx, d, spec.ComputerID)
	requireReleased(t, uuid, file)
}

// TestDiskKeptOnRetry: making the home of the same attempt again (a create
// retried) keeps its filesystem and loop device, which the home names.
func TestDiskKeptOnRetry(t *testing.T) {
	c := newDiskComputer(t)
	ctx, d, root, spec, m, dev, uuid := c.ctx, c.d, c.root, c.spec, c.m, c.dev, c.uuid
	mustRun(t, ctx, d, m.ID, "echo kept > /home/berth/note")

	v, err := d.cli.VolumeInspect(ctx, namesOf(spec.ComputerID).volume, client.VolumeInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.createHome(ctx, spec.ComputerID, testImage, v.Volume.Labels); err != nil {
		t.Fatalf("home made again: %v", err)
	}
	if dev2, uuid2, _ := diskOf(t, ctx, d, root, spec.ComputerID); dev2 != dev || uuid2 != uuid {
		t.Errorf("the home moved from %s (%s) to %s (%s)", dev, uuid, dev2, uuid2)
	}
	if got := mustRun(t, ctx, d, m.ID, "cat /home/berth/note"); got != "kept" {
		t.Errorf("note = %q", got)
	}
}

// TestCollectorRemoveVolume: removing a computer's volumes one by one, as a
// lending agent's cleanup does, releases the disk too.
func TestCollectorRemoveVolume(t *testing.T) {
	c := newDiskComputer(t)
	ctx, d, spec, m, uuid, file := c.ctx, c.d, c.spec, c.m, c.uuid, c.file
	if _, err := d.cli.ContainerRemove(ctx, m.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	gc, err := NewCollector(d.opts.Host, nil, d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	for _, v := range []string{namesOf(spec.ComputerID).volume, DiskPrefix + spec.ComputerID, "berth-v-missing-" + randomID(t)} {
		if err := gc.RemoveVolume(ctx, v); err != nil {
			t.Errorf("RemoveVolume(%s): %v", v, err)
		}
	}
	requireReleased(t, uuid, file)
}

// TestDestroyRemovesLeftHelper: a disk helper left running by a process
// killed while it ran (its container outlives it) holds the disk volume;
// Destroy removes it and still releases the disk.
func TestDestroyRemovesLeftHelper(t *testing.T) {
	c := newDiskComputer(t)
	ctx, d, spec, m, uuid, file := c.ctx, c.d, c.spec, c.m, c.uuid, c.file
	left, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:      testImage,
			Entrypoint: []string{"sleep", "600"},
			Labels:     map[string]string{labelDiskHelper: "true"},
		},
		HostConfig: &container.HostConfig{
			NetworkMode: "none",
			Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: DiskPrefix + spec.ComputerID, Target: "/disk"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cli.ContainerRemove(context.Background(), left.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := d.cli.ContainerStart(ctx, left.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatalf("Destroy with a helper left running: %v", err)
	}
	if _, err := d.cli.ContainerInspect(ctx, left.ID, client.ContainerInspectOptions{}); err == nil {
		t.Error("the helper left running is still there")
	}
	requireGone(t, ctx, d, spec.ComputerID)
	requireReleased(t, uuid, file)
}
