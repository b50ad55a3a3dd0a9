package docker

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

// TestCreateHardened checks every property of SPEC 6's Docker table, once
// through the engine's view of the container and once from inside it.
func TestCreateHardened(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	spec := testSpec(t)
	m := create(t, ctx, d, spec)
	n := namesOf(spec.ComputerID)

	if m.ID != n.container {
		t.Errorf("Machine.ID = %q, want %q", m.ID, n.container)
	}
	checkLabels(t, "Machine.Labels", m.Labels, spec, d.opts.Grace)

	res, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	hc := c.HostConfig

	t.Run("engine", func(t *testing.T) {
		if c.State == nil || !c.State.Running {
			t.Errorf("state = %+v, want running", c.State)
		}
		if c.Name != "/"+n.container {
			t.Errorf("name = %q, want /%s", c.Name, n.container)
		}
		if c.Config.Image != testImage {
			t.Errorf("image = %q, want %q", c.Config.Image, testImage)
		}
		if c.Config.User != "1000:1000" {
			t.Errorf("user = %q, want 1000:1000", c.Config.User)
		}
		if !hc.ReadonlyRootfs {
			t.Error("root filesystem is writable")
		}
		if hc.Privileged {
			t.Error("privileged")
		}
		if tmp := hc.Tmpfs["/tmp"]; !strings.Contains(tmp, "size=1024m") || !strings.Contains(tmp, "mode=1777") {
			t.Errorf("tmpfs /tmp = %q, want size=1024m and mode=1777", tmp)
		}
		if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
			t.Errorf("CapDrop = %v, CapAdd = %v; want [ALL] and none", hc.CapDrop, hc.CapAdd)
		}
		if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
			t.Errorf("SecurityOpt = %v, want no-new-privileges", hc.SecurityOpt)
		}
		if want := int64(DefaultMemoryMB) << 20; hc.Memory != want || hc.MemorySwap != want {
			t.Errorf("Memory = %d, MemorySwap = %d; want both %d", hc.Memory, hc.MemorySwap, want)
		}
		if hc.NanoCPUs != 1e9 {
			t.Errorf("NanoCPUs = %d, want 1e9", hc.NanoCPUs)
		}
		if hc.PidsLimit == nil || *hc.PidsLimit != DefaultPids {
			t.Errorf("PidsLimit = %v, want %d", hc.PidsLimit, DefaultPids)
		}
		if want := int64(DefaultShmMB) << 20; hc.ShmSize != want {
			t.Errorf("ShmSize = %d, want %d", hc.ShmSize, want)
		}
		if rt, err := d.Runtime(ctx); err != nil {
			t.Error(err)
		} else if hc.Runtime != rt.Name {
			t.Errorf("Runtime = %q, want %s", hc.Runtime, rt)
		}
		for k, v := range spec.Labels() {
			if c.Config.Labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, c.Config.Labels[k], v)
			}
		}

		env := map[string]string{}
		for _, kv := range c.Config.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
			for _, secret := range spec.Credentials {
				if strings.Contains(v, secret) {
					t.Errorf("environment carries a credential: %s", kv)
				}
			}
		}
		if env[computerd.EnvTokenHash] != spec.TokenHash || env[computerd.EnvComputerID] != spec.ComputerID {
			t.Errorf("environment %v lacks the token hash or computer id", c.Config.Env)
		}
		for k, v := range spec.Env {
			if env[k] != v {
				t.Errorf("environment %s = %q, want %q", k, env[k], v)
			}
		}

		// Ports: none published.
		if len(hc.PortBindings) != 0 || hc.PublishAllPorts {
			t.Errorf("PortBindings = %v, PublishAllPorts = %v; want none", hc.PortBindings, hc.PublishAllPorts)
		}
		for p, b := range c.NetworkSettings.Ports {
			if len(b) != 0 {
				t.Errorf("port %v published to %v", p, b)
			}
		}

		// Network: its own, internal, labelled, and the only one.
		if got := slices.Collect(maps.Keys(c.NetworkSettings.Networks)); !slices.Equal(got, []string{n.network}) {
			t.Errorf("networks = %v, want [%s]", got, n.network)
		}
		ep := c.NetworkSettings.Networks[n.network]
		if ep == nil || !ep.IPAddress.IsValid() {
			t.Fatalf("no address on %s: %+v", n.network, ep)
		}
		if want := "http://" + ep.IPAddress.String() + ":" + strconv.Itoa(computerd.Port); m.Endpoint != want {
			t.Errorf("Endpoint = %q, want %q", m.Endpoint, want)
		}
		nw, err := d.cli.NetworkInspect(ctx, n.network, client.NetworkInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nw.Network.Internal {
			t.Errorf("network %s is not internal", n.network)
		}
		if got := nw.Network.Options[bridgeNameOption]; got != bridgeName(spec.ComputerID) || !strings.HasPrefix(got, BridgePrefix) || len(got) > 15 {
			t.Errorf("bridge interface = %q, want %q", got, bridgeName(spec.ComputerID))
		}
		checkLabels(t, "network labels", nw.Network.Labels, spec, d.opts.Grace)
		if cfg := nw.Network.IPAM.Config; len(cfg) != 1 || cfg[0].Subnet.Bits() != SubnetBits {
			t.Errorf("network IPAM = %+v, want one /%d of Berth's range", cfg, SubnetBits)
		}

		// Home: its own labelled volume at /home/berth.
		if len(c.Mounts) != 1 {
			t.Fatalf("mounts = %+v, want the home volume only", c.Mounts)
		}
		mt := c.Mounts[0]
		if mt.Type != mount.TypeVolume || mt.Name != n.volume || mt.Destination != computerd.Home || !mt.RW {
			t.Errorf("mount = %+v, want volume %s at %s, writable", mt, n.volume, computerd.Home)
		}
		vol, err := d.cli.VolumeInspect(ctx, n.volume, client.VolumeInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkLabels(t, "volume labels", vol.Volume.Labels, spec, d.opts.Grace)
	})

	t.Run("inside", func(t *testing.T) {
		if got := mustRun(t, ctx, d, m.ID, "id -u; id -g"); got != "1000\n1000" {
			t.Errorf("id = %q, want 1000 1000", got)
		}
		status := mustRun(t, ctx, d, m.ID, "cat /proc/self/status")
		for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(status, want+"\n") {
				t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
			}
		}
		if out, code := run(t, ctx, d, m.ID, "touch /x"); code == 0 {
			t.Errorf("touch /x succeeded on a read-only root: %s", out)
		}
		if got := mustRun(t, ctx, d, m.ID, "touch /tmp/x && stat -c %a /tmp && df -k /tmp | tail -n 1"); !strings.HasPrefix(got, "1777\n") || !strings.Contains(got, " 1048576 ") {
			t.Errorf("/tmp: mode and size = %q, want 1777 and 1048576 KiB", got)
		}
		if got := mustRun(t, ctx, d, m.ID, "df -k /dev/shm | tail -n 1"); !strings.Contains(got, " 524288 ") {
			t.Errorf("/dev/shm = %q, want 524288 KiB", got)
		}
		if got := mustRun(t, ctx, d, m.ID, "echo hi > ~/x && cat ~/x && stat -c %u:%g "+computerd.Home); got != "hi\n1000:1000" {
			t.Errorf("home: %q, want it writable and owned by 1000:1000", got)
		}

		limit := mustRun(t, ctx, d, m.ID, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
		if want := strconv.FormatInt(DefaultMemoryMB<<20, 10); limit != want {
			t.Errorf("memory limit = %s, want %s", limit, want)
		}
		if swap, code := run(t, ctx, d, m.ID, "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); code == 0 {
			if want := strconv.FormatInt(DefaultMemoryMB<<20, 10); strings.TrimSpace(swap) != want {
				t.Errorf("memory+swap limit = %s, want %s", swap, want)
			}
		} else if v2, code := run(t, ctx, d, m.ID, "cat /sys/fs/cgroup/memory.swap.max"); code == 0 && strings.TrimSpace(v2) != "0" {
			t.Errorf("swap limit = %s, want 0 beyond memory", v2)
		}
		if underGVisor(t, ctx, d) {
			// gVisor's own cgroup files do not show the host's process
			// limit: it is on the sandbox's cgroup on the host.
			if b, err := os.ReadFile("/sys/fs/cgroup/pids/docker/" + c.ID + "/pids.max"); err == nil && strings.TrimSpace(string(b)) != strconv.Itoa(DefaultPids) {
				t.Errorf("host pids.max = %s, want %d", b, DefaultPids)
			}
		} else if got := mustRun(t, ctx, d, m.ID, "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"); got != strconv.Itoa(DefaultPids) {
			t.Errorf("pids.max = %s, want %d", got, DefaultPids)
		}
		cpu := mustRun(t, ctx, d, m.ID, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null || cat /sys/fs/cgroup/cpu.max")
		if f := strings.Fields(cpu); len(f) != 2 || f[0] != f[1] {
			t.Errorf("cpu quota and period = %q, want one CPU", cpu)
		}

	})

	t.Run("isolated", func(t *testing.T) {
		// A container on the engine's default network listens; the host
		// reaches it, the computer does not.
		other := plainContainer(t, ctx, d, true)
		startDetached(t, ctx, d, other, "nc", "-ll", "-p", "8080", "-e", "/bin/echo", "other")
		res, err := d.cli.ContainerInspect(ctx, other, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ip string
		for _, ep := range res.Container.NetworkSettings.Networks {
			ip = ep.IPAddress.String()
		}
		if got, err := dialRead(ctx, net.JoinHostPort(ip, "8080")); err != nil || got != "other\n" {
			t.Fatalf("control: the host cannot reach the listener at %s: %q, %v", ip, got, err)
		}
		if out, code := run(t, ctx, d, m.ID, "nc -w 2 "+ip+" 8080 </dev/null"); code == 0 || strings.Contains(out, "other") {
			t.Errorf("the computer reached a container on another network at %s: exit %d, %q", ip, code, out)
		}
	})

	t.Run("reachable", func(t *testing.T) {
		startDetached(t, ctx, d, m.ID, "nc", "-ll", "-p", strconv.Itoa(computerd.Port), "-e", "/bin/echo", "berth-ok")
		u, err := url.Parse(m.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dialRead(ctx, u.Host)
		if err != nil {
			if _, inContainer := os.Stat("/.dockerenv"); inContainer == nil {
				t.Skipf("the tests run in a container, which reaches computers only through %s: %v", SettingJoinContainers, err)
			}
			t.Fatalf("reach the computer at %s from the host: %v", u.Host, err)
		}
		if got != "berth-ok\n" {
			t.Errorf("read %q from the computer, want berth-ok", got)
		}
	})
}

// dialRead connects to addr, retrying while the listener starts, and reads
// what it sends.
func dialRead(ctx context.Context, addr string) (string, error) {
	var lastErr error
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			b, err := io.ReadAll(conn)
			conn.Close()
			if err == nil && len(b) > 0 {
				return string(b), nil
			}
			lastErr = err
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return "", errors.Join(lastErr, ctx.Err())
}

// TestPidsLimitHolds runs a fork bomb of sleeps: the process limit stops it.
func TestPidsLimitHolds(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	if underGVisor(t, ctx, d) {
		t.Skip("under gVisor (runsc) each process inside also costs host threads of the sandbox (about two each on this kernel's systrap platform), all under the host's limit: the limit holds at about half as many processes, and what hits it is the exec session, not fork (see docs/providers.md)")
	}
	m := create(t, ctx, d, testSpec(t))

	out, code := run(t, ctx, d, m.ID, `i=0; while [ $i -lt 600 ]; do sleep 120 & i=$((i+1)); echo $i; done`)
	if code == 0 {
		t.Fatalf("600 processes started under a limit of %d", DefaultPids)
	}
	lines := strings.Fields(out)
	spawned := 0
	for _, l := range lines {
		if n, err := strconv.Atoi(l); err == nil {
			spawned = n
		}
	}
	if spawned < DefaultPids-16 || spawned >= DefaultPids {
		t.Errorf("spawned %d processes before fork failed, want just under %d; output ends %q", spawned, DefaultPids, lines[max(0, len(lines)-8):])
	}
	if !strings.Contains(out, "can't fork") && !strings.Contains(out, "Resource temporarily unavailable") {
		t.Errorf("fork did not fail for want of pids; output ends %q", lines[max(0, len(lines)-8):])
	}
	t.Logf("fork failed after %d processes", spawned)
}

// TestMemoryLimitHolds runs a process past a small memory limit: the kernel
// kills it, swap does not absorb it.
func TestMemoryLimitHolds(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{MemoryMB: 64})
	if underGVisor(t, ctx, d) {
		t.Skip("under gVisor (runsc) the host's OOM killer stops the whole sandbox, the computer, not the one process past the limit (see docs/providers.md)")
	}
	m := create(t, ctx, d, testSpec(t))

	limit := mustRun(t, ctx, d, m.ID, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
	if limit != strconv.Itoa(64<<20) {
		t.Errorf("memory limit = %s, want %d", limit, 64<<20)
	}
	// sort holds its whole single-line input in memory.
	out, code := run(t, ctx, d, m.ID, "head -c 200000000 /dev/zero | sort > /dev/null")
	if code == 0 {
		t.Errorf("a process held 200 MB under a 64 MB limit: %s", out)
	}
	if code != 137 {
		t.Logf("sort exited %d (want 137, killed): %s", code, out)
	}
	if got := mustRun(t, ctx, d, m.ID, "echo alive"); got != "alive" {
		t.Errorf("computer after the kill: %q", got)
	}
}

func TestDestroyRemovesEverything(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	spec := testSpec(t)
	m := create(t, ctx, d, spec)

	res, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Destroy by the container id works as well as by the name.
	if err := d.Destroy(ctx, res.Container.ID); err != nil {
		t.Fatalf("Destroy by id: %v", err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
	for _, id := range []string{m.ID, res.Container.ID, m.ID} {
		if err := d.Destroy(ctx, id); err != nil {
			t.Errorf("Destroy(%s) of a destroyed computer: %v", id, err)
		}
	}
}

func TestDestroyLeavesOthersAlone(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	name := plainContainer(t, ctx, d, false)
	if err := d.Destroy(ctx, name); !errors.Is(err, ErrNotManaged) {
		t.Errorf("Destroy of a container Berth did not create = %v, want ErrNotManaged", err)
	}
	if _, err := d.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("unmanaged container gone: %v", err)
	}
}

func TestListFindsByLabels(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	spec := testSpec(t)
	m := create(t, ctx, d, spec)

	// A computer whose container is gone but whose volume stayed.
	orphan := testSpec(t)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.Destroy(ctx, ContainerPrefix+orphan.ComputerID)
	})
	if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: VolumePrefix + orphan.ComputerID, Labels: orphan.Labels()}); err != nil {
		t.Fatal(err)
	}

	list, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found, foundOrphan bool
	for _, got := range list {
		switch got.Labels[providers.LabelAttempt] {
		case spec.AttemptID:
			found = true
			if got.ID != m.ID || got.Endpoint != m.Endpoint || !maps.Equal(got.Labels, m.Labels) {
				t.Errorf("List has %+v, want %+v", got, m)
			}
		case orphan.AttemptID:
			foundOrphan = true
			if got.ID != ContainerPrefix+orphan.ComputerID || got.Endpoint != "" {
				t.Errorf("List has orphan %+v, want ID %s and no endpoint", got, ContainerPrefix+orphan.ComputerID)
			}
		}
	}
	if !found || !foundOrphan {
		t.Fatalf("List = %+v: computer found %v, orphaned volume found %v", list, found, foundOrphan)
	}
	if err := d.Destroy(ctx, ContainerPrefix+orphan.ComputerID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, orphan.ComputerID)
}

func TestMissingImage(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{DesktopImage: "berth/provider-test-missing:" + randomID(t)})
	spec := testSpec(t)
	spec.Image = providers.ImageDesktop
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.Destroy(ctx, ContainerPrefix+spec.ComputerID)
	})
	_, err := d.Create(ctx, spec)
	if !errors.Is(err, providers.ErrBadImage) {
		t.Fatalf("Create = %v, want ErrBadImage", err)
	}
	if !strings.Contains(err.Error(), "make images") || !strings.Contains(err.Error(), SettingDesktopImage) {
		t.Errorf("error %q does not say how to get the image", err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
}

func TestFailedCreateCleansUp(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	// Joining a container that does not exist fails after the network, the
	// volume and the container were created.
	d := newTestDocker(t, ctx, Options{JoinContainers: []string{"berth-provider-test-absent-" + randomID(t)}})
	spec := testSpec(t)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.Destroy(ctx, ContainerPrefix+spec.ComputerID)
	})
	if _, err := d.Create(ctx, spec); err == nil || !strings.Contains(err.Error(), SettingJoinContainers) {
		t.Fatalf("Create = %v, want a failure to join", err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
}

func TestLeftoverVolumeIsKept(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	spec := testSpec(t)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.Destroy(ctx, ContainerPrefix+spec.ComputerID)
	})
	earlier := spec
	earlier.AttemptID = "earlier"
	if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: VolumePrefix + spec.ComputerID, Labels: earlier.Labels()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(ctx, spec); !errors.Is(err, ErrLeftover) {
		t.Fatalf("Create over a leftover volume = %v, want ErrLeftover", err)
	}
	if _, err := d.cli.VolumeInspect(ctx, VolumePrefix+spec.ComputerID, client.VolumeInspectOptions{}); err != nil {
		t.Errorf("the earlier attempt's volume was removed: %v", err)
	}
	if _, err := d.cli.NetworkInspect(ctx, NetworkPrefix+spec.ComputerID, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("this attempt's network was left behind: %v", err)
	}
	if err := d.Destroy(ctx, ContainerPrefix+spec.ComputerID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
}

// TestJoinContainers stands in for a supervisor that runs in a container: it
// joins the computer's network, reaches the computer, and Destroy still
// removes the network.
func TestJoinContainers(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	probe := newTestDocker(t, ctx, Options{})
	joiner := plainContainer(t, ctx, probe, true)
	d := newTestDocker(t, ctx, Options{JoinContainers: []string{joiner}})
	spec := testSpec(t)
	m := create(t, ctx, d, spec)

	nw, err := d.cli.NetworkInspect(ctx, NetworkPrefix+spec.ComputerID, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ep := range nw.Network.Containers {
		names = append(names, ep.Name)
	}
	slices.Sort(names)
	if want := []string{m.ID, joiner}; !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Errorf("network members = %v, want %v", names, want)
	}

	startDetached(t, ctx, d, m.ID, "nc", "-ll", "-p", strconv.Itoa(computerd.Port), "-e", "/bin/echo", "berth-ok")
	u, _ := url.Parse(m.Endpoint)
	script := "for i in $(seq 50); do nc -w 2 " + u.Hostname() + " " + u.Port() + " 2>/dev/null && exit 0; sleep 0.1; done; exit 1"
	if got := mustRun(t, ctx, d, joiner, script); got != "berth-ok" {
		t.Errorf("joiner read %q from the computer, want berth-ok", got)
	}

	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
	res, err := d.cli.ContainerInspect(ctx, joiner, client.ContainerInspectOptions{})
	if err != nil || !res.Container.State.Running {
		t.Errorf("joined container after Destroy: %v", err)
	}
}

func TestStats(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{MemoryMB: 256})
	m := create(t, ctx, d, testSpec(t))
	s, err := d.Stats(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryLimitBytes != 256<<20 || s.PidsLimit != DefaultPids || s.Pids == 0 || s.MemoryBytes == 0 {
		t.Errorf("Stats = %+v, want a 256 MiB limit, %d pids limit, some use", s, DefaultPids)
	}
	if _, err := d.Stats(ctx, ContainerPrefix+"absent-"+randomID(t)); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Stats of an absent computer = %v, want ErrNotFound", err)
	}
}

// TestUnreachableEngine needs no engine.
func TestUnreachableEngine(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	d, err := New(Options{Host: "unix:///nonexistent/berth-test/docker.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Create(ctx, testSpec(t)); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("Create = %v, want ErrUnavailable", err)
	} else {
		t.Logf("Create: %v", err)
	}
	if err := d.Destroy(ctx, ContainerPrefix+"x"); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("Destroy = %v, want ErrUnavailable", err)
	}
	if _, err := d.List(ctx); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("List = %v, want ErrUnavailable", err)
	}
}

// checkLabels checks that labels are spec's plus an expiry at the end of
// its lease and the grace (garbage.go), as made within the last minute.
func checkLabels(t *testing.T, what string, labels map[string]string, spec providers.Spec, grace time.Duration) {
	t.Helper()
	rest := maps.Clone(labels)
	exp, err := strconv.ParseInt(rest[LabelExpires], 10, 64)
	delete(rest, LabelExpires)
	if !maps.Equal(rest, spec.Labels()) {
		t.Errorf("%s = %v, want %v and %s", what, labels, spec.Labels(), LabelExpires)
	}
	hi := time.Now().Add(spec.Lease + grace)
	if err != nil || exp > hi.Unix() || exp < hi.Add(-time.Minute).Unix() {
		t.Errorf("%s: %s=%q, want about %d (lease %v and grace %v from now)", what, LabelExpires, labels[LabelExpires], hi.Unix(), spec.Lease, grace)
	}
}
