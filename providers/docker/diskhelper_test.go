package docker

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

// standingHelper returns the id of the provider's standing helper of the
// test image, and how many it has started.
func standingHelper(d *Docker) (string, int) {
	d.helpers.mu.Lock()
	defer d.helpers.mu.Unlock()
	if s := d.helpers.byImage[testImage]; s != nil {
		return s.id, d.helpers.starts
	}
	return "", d.helpers.starts
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

// TestStandingHelperEndsWithItsProvider: a standing helper whose provider
// is gone (its connection closed, as when the process dies) finishes and
// leaves nothing on the engine; the provider's next step starts another.
func TestStandingHelperEndsWithItsProvider(t *testing.T) {
	c := newDiskComputer(t)
	ctx, d := c.ctx, c.d
	d.helpers.mu.Lock()
	s := d.helpers.byImage[testImage]
	d.helpers.mu.Unlock()
	if s == nil {
		t.Fatal("no standing helper after a create with a disk quota")
	}
	s.conn.Close()
	testkit.EventuallyContext(t, ctx, "the helper's container is gone", func() bool {
		_, err := d.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	})
	if err := d.Destroy(ctx, c.m.ID); err != nil {
		t.Fatal(err)
	}
	requireReleased(t, c.uuid, c.file)
	if id, starts := standingHelper(d); id == s.id || starts != 2 {
		t.Errorf("helper %s after %s ended, %d started; want a new one", id, s.id, starts)
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

// fakeStanding is a standing helper whose other end the test plays: it
// reads the requests and writes the engine's framed stream.
func fakeStanding(t *testing.T) (*standing, net.Conn) {
	t.Helper()
	ours, theirs := net.Pipe()
	s := &standing{
		id:      "fake",
		conn:    client.HijackedResponse{Conn: ours, Reader: bufio.NewReader(ours)},
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
		pending: map[uint64]chan answer{},
	}
	go s.read()
	t.Cleanup(func() {
		theirs.Close()
		<-s.done
	})
	return s, theirs
}

// frame writes one frame of the engine's stream (1 stdout, 2 stderr).
func frame(t *testing.T, c net.Conn, stream byte, b string) {
	t.Helper()
	h := make([]byte, 8, 8+len(b))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(b)))
	if _, err := c.Write(append(h, b...)); err != nil {
		t.Fatal(err)
	}
}

// TestStandingProtocol: requests go out as one line, answers come back to
// their step whatever their order, and a code other than 0 is an error
// carrying the output.
func TestStandingProtocol(t *testing.T) {
	s, c := fakeStanding(t)
	frame(t, c, 1, readyLine+"\n")
	<-s.ready
	ctx := testContext(t, 10*time.Second)
	type res struct {
		out string
		err error
	}
	first, second := make(chan res, 1), make(chan res, 1)
	go func() {
		out, err := s.call(ctx, opMake, []string{"/volumes/berth-d-a/_data/disk.img", "33554432", "1000:1000"})
		first <- res{out, err}
	}()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || line != "1 make /volumes/berth-d-a/_data/disk.img 33554432 1000:1000\n" {
		t.Fatalf("request %q, %v", line, err)
	}
	go func() {
		out, err := s.call(ctx, opRelease, []string{"/volumes/berth-d-b/_data/disk.img"})
		second <- res{out, err}
	}()
	if line, err = r.ReadString('\n'); err != nil || line != "2 release /volumes/berth-d-b/_data/disk.img\n" {
		t.Fatalf("request %q, %v", line, err)
	}
	// Answers in the other order, the second split over two frames.
	frame(t, c, 1, "2 1 "+hex.EncodeToString([]byte("no such")))
	frame(t, c, 2, "noise on stderr\n")
	frame(t, c, 1, hex.EncodeToString([]byte(" file\n"))+"\n1 0 "+hex.EncodeToString([]byte("berth-disk /dev/loop7 ext4\n"))+"\n")
	if got := <-first; got.err != nil || got.out != "berth-disk /dev/loop7 ext4\n" {
		t.Errorf("make answered %q, %v", got.out, got.err)
	}
	if got := <-second; got.err == nil || !strings.Contains(got.err.Error(), "exited with 1: no such file") {
		t.Errorf("release answered %q, %v; want the error with its output", got.out, got.err)
	}
}

// TestStandingBounds: a helper that says too much, or something that is
// not an answer, is cut off; its running steps fail as gone (they may have
// run), and later steps as never started.
func TestStandingBounds(t *testing.T) {
	for name, say := range map[string]func(t *testing.T, c net.Conn){
		"frame too big": func(t *testing.T, c net.Conn) {
			h := make([]byte, 8)
			h[0] = 1
			binary.BigEndian.PutUint32(h[4:], maxFrame+1)
			c.Write(h)
		},
		"line too long": func(t *testing.T, c net.Conn) {
			frame(t, c, 1, "1 0 "+strings.Repeat("0", maxAnswerLine))
		},
		"not an answer": func(t *testing.T, c net.Conn) { frame(t, c, 1, "1 zero 00\n") },
		"bad output":    func(t *testing.T, c net.Conn) { frame(t, c, 1, "1 0 zz\n") },
		"ready twice":   func(t *testing.T, c net.Conn) { frame(t, c, 1, readyLine+"\n") },
		"helper ended":  func(t *testing.T, c net.Conn) { c.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			s, c := fakeStanding(t)
			frame(t, c, 1, readyLine+"\n")
			<-s.ready
			ctx := testContext(t, 10*time.Second)
			errc := make(chan error, 1)
			go func() {
				_, err := s.call(ctx, opRelease, []string{"/volumes/berth-d-a/_data/disk.img"})
				errc <- err
			}()
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			go say(t, c)
			err := <-errc
			if !errors.Is(err, errHelperGone) || errors.Is(err, errNotStarted) {
				t.Errorf("the running step: %v; want gone, maybe run", err)
			}
			<-s.done
			if s.alive() {
				t.Error("the helper is still taken as alive")
			}
			if _, err := s.call(ctx, opRelease, []string{"/x"}); !errors.Is(err, errHelperGone) || !errors.Is(err, errNotStarted) {
				t.Errorf("a later step: %v; want gone, never run", err)
			}
		})
	}
}

// TestStepArguments: an argument that could change a request's fields is
// refused before any helper is asked.
func TestStepArguments(t *testing.T) {
	d := &Docker{}
	d.helpers.d = d
	ctx := testContext(t, 10*time.Second)
	for _, args := range [][]string{{"/volumes/a b/disk.img"}, {"/x", "1\n2 release /y"}, {""}} {
		if _, err := d.helpers.run(ctx, testImage, "/var/lib/docker/volumes", opMake, args); err == nil || !strings.Contains(err.Error(), "argument") {
			t.Errorf("step with %q: %v", args, err)
		}
	}
	if _, err := d.helpers.run(ctx, testImage, "/var/lib/docker/volumes", "format", []string{"/x"}); err == nil {
		t.Error("a step of no known kind ran")
	}
	if d.helpers.starts != 0 {
		t.Errorf("%d helpers started", d.helpers.starts)
	}
}

// emptyDiskVolume makes a disk volume with no disk in it, which release
// steps find nothing to do in.
func emptyDiskVolume(t *testing.T, ctx context.Context, d *Docker) volume.Volume {
	t.Helper()
	v, err := d.createVolume(ctx, DiskPrefix+"empty-"+randomID(t), map[string]string{providers.LabelManaged: "true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.removeVolume(ctx, v, true)
	})
	return v
}

// TestStandingHelperReapsSteps: many steps leave no processes behind in
// the helper (each step's processes are reaped), so its process limit is
// never used up over a long life.
func TestStandingHelperReapsSteps(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{DiskMB: 16})
	v := emptyDiskVolume(t, ctx, d)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if _, err := d.diskStep(ctx, testImage, v, opRelease); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	id, starts := standingHelper(d)
	if starts != 1 {
		t.Errorf("%d helpers started for 200 steps", starts)
	}
	// Left: process 1 and the loop, besides this check's own shell, ls
	// and grep; no zombie.
	var got string
	testkit.EventuallyContext(t, ctx, "the steps' processes reaped", func() bool {
		got = mustRun(t, ctx, d, id, "ls /proc | grep -c '^[0-9]'; cat /proc/[0-9]*/stat 2>/dev/null | cut -d' ' -f3 | grep -c Z || :")
		return got == "5\n0"
	})
}

// TestStandingHelperReplacedAfterItsUse: a helper that has served
// standingUse is replaced by the next step, and ends.
func TestStandingHelperReplacedAfterItsUse(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	clk := clock.NewFake(time.Now())
	d := newTestDocker(t, ctx, Options{DiskMB: 16, Clock: clk})
	v := emptyDiskVolume(t, ctx, d)
	step := func() {
		t.Helper()
		if _, err := d.diskStep(ctx, testImage, v, opRelease); err != nil {
			t.Fatal(err)
		}
	}
	step()
	first, _ := standingHelper(d)
	clk.Advance(standingUse - time.Minute)
	step()
	if id, starts := standingHelper(d); id != first || starts != 1 {
		t.Fatalf("helper %s (%d started) before its use is over, want %s", id, starts, first)
	}
	clk.Advance(2 * time.Minute)
	step()
	if id, starts := standingHelper(d); id == first || starts != 2 {
		t.Errorf("helper %s (%d started) after its use, want a new one", id, starts)
	}
	testkit.EventuallyContext(t, ctx, "the replaced helper is gone", func() bool {
		_, err := d.cli.ContainerInspect(ctx, first, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	})
}
