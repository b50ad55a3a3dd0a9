package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/pgtest"
)

// engineSubnets returns the IPv4 subnets of every network on the engine,
// by network name, and fails the test when two of them overlap.
func engineSubnets(t *testing.T) map[string]netip.Prefix {
	t.Helper()
	ids, err := exec.Command("docker", "network", "ls", "-q").Output()
	if err != nil {
		t.Fatal(err)
	}
	type netInfo struct {
		Name string
		IPAM struct{ Config []struct{ Subnet string } }
	}
	var nets []netInfo
	for _, id := range strings.Fields(string(ids)) {
		out, err := exec.Command("docker", "network", "inspect", id).Output()
		if err != nil {
			continue // removed since it was listed
		}
		var one []netInfo
		if err := json.Unmarshal(out, &one); err != nil {
			t.Fatal(err)
		}
		nets = append(nets, one...)
	}
	got := map[string]netip.Prefix{}
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			p, err := netip.ParsePrefix(c.Subnet)
			if err != nil || !p.Addr().Is4() {
				continue
			}
			for other, q := range got {
				if q.Overlaps(p) {
					t.Fatalf("networks %s (%v) and %s (%v) overlap", other, q, n.Name, p)
				}
			}
			got[n.Name] = p
		}
	}
	return got
}

// requireDefaultPools fails when the engine was given address pools of its
// own: these tests are about the engine a user gets.
func requireDefaultPools(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile("/etc/docker/daemon.json"); err == nil && strings.Contains(string(b), "address-pools") {
		t.Fatalf("/etc/docker/daemon.json sets address pools (%s); these tests need an engine as installed", b)
	}
}

// eachAgent runs f for the agents named prefix0..n-1, at most par at once.
func eachAgent(prefix string, n, par int, f func(id string)) {
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f(fmt.Sprintf("%s%d", prefix, i))
		})
	}
	wg.Wait()
}

// startMany connects and starts n agents named prefix0..n-1 on p, at most
// par at once, and fails the test on any start that does not run.
func startMany(t *testing.T, p *proc, prefix string, n, par int) {
	t.Helper()
	eachAgent(prefix, n, par, func(id string) {
		if st, err := p.call("POST", "/v1/agents", "", map[string]any{"id": id, "name": id}, nil); err != nil || st != 201 {
			t.Errorf("create agent %s: %d %v", id, st, err)
			return
		}
		if st, err := p.call("POST", "/v1/computers", "", map[string]any{"agent": id, "provider": "docker", "leaseSeconds": 900, "dailySeconds": 3600}, nil); err != nil || st != 201 {
			t.Errorf("connect %s: %d %v", id, st, err)
			return
		}
		var s session
		if st, err := p.call("POST", "/v1/agents/"+id+"/computer/start", "start-"+id, nil, &s); err != nil || st != 200 || s.State != "running" {
			t.Errorf("start %s: %d %v %+v", id, st, err, s)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
}

// stopMany stops the agents' sessions, par at once.
func stopMany(t *testing.T, p *proc, prefix string, n, par int) {
	t.Helper()
	eachAgent(prefix, n, par, func(id string) {
		if st, err := p.call("POST", "/v1/agents/"+id+"/computer/stop", "", nil, nil); err != nil || st != 200 {
			t.Errorf("stop %s: %d %v", id, st, err)
		}
	})
}

// computerSubnets returns the subnets of the networks a supervisor made:
// its deployment's computer networks, and the networks of the holders its
// network pool made (a computer started in a holder's network namespace).
func computerSubnets(t *testing.T, all map[string]netip.Prefix, p *proc) map[string]netip.Prefix {
	t.Helper()
	host, _ := os.Hostname()
	got := map[string]netip.Prefix{}
	for _, f := range []string{"label=dev.berth.deployment=" + p.deployment(), fmt.Sprintf("label=dev.berth.holder-owner=%s/%d", host, p.cmd.Process.Pid)} {
		out, err := exec.Command("docker", "network", "ls", "--format", "{{.Name}}", "--filter", f).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range strings.Fields(string(out)) {
			p, ok := all[name]
			if !ok {
				t.Fatalf("computer network %s has no IPv4 subnet", name)
			}
			if p.Bits() != 28 {
				t.Errorf("computer network %s has %v, want a /28 of Berth's range", name, p)
			}
			got[name] = p
		}
	}
	return got
}

// TestManyComputersDefaultEngine starts 48 computers on an engine with its
// default address pools (31 networks' worth, fewer with the engine's other
// networks): every one starts, on a subnet of its own; after a SIGKILL of
// the supervisor and a restart, they are adopted, stopped, and nothing is
// left behind. make bench-density starts 200.
func TestManyComputersDefaultEngine(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	requireDefaultPools(t)
	heavy(t)
	const n = 48
	dir := t.TempDir()
	// These tests are about networks: each computer's disk quota (a loop
	// device and two helper runs) is left to providers/docker's quota tests.
	env := []string{"COMPUTER_MEMORY_MB=128", "COMPUTER_DISK_MB=0", "COMPUTER_TOKEN_SECRET=many-computers-secret-0123456789abcdef"}
	a := runSupervisor(t, dir, env...)
	start := time.Now()
	startMany(t, a, "many", n, 24)
	t.Logf("%d computers started in %v", n, time.Since(start).Round(time.Millisecond))
	dep := a.deployment()
	t.Cleanup(func() { removeDeployment("deployment=" + dep) })
	all := engineSubnets(t)
	if got := computerSubnets(t, all, a); len(got) < n {
		t.Fatalf("%d computer networks for %d computers", len(got), n)
	}
	if c := countContainers(t, dep); c != n {
		t.Fatalf("%d containers for %d computers", c, n)
	}

	a.kill()
	b := runSupervisor(t, dir, env...)
	if b.deployment() != dep {
		t.Fatalf("the restarted supervisor has deployment %s, want %s", b.deployment(), dep)
	}
	var x execResult
	b.must("POST", "/v1/agents/many7/computer/exec", map[string]any{"command": "echo adopted"}, 200, &x)
	if x.Stdout != "adopted\n" {
		t.Fatalf("exec after the restart: %+v", x)
	}
	stopMany(t, b, "many", n, 24)
	waitGone(t, dep)
}

// TestTwoSupervisorsSubnets: two supervisors on one engine and one
// PostgreSQL start 24 computers each at once, together more than the
// engine's default pools hold; their networks never share a subnet, though
// neither knows which subnets the other takes.
func TestTwoSupervisorsSubnets(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	requireDefaultPools(t)
	heavy(t)
	const each = 24
	url := pgtest.Start(t)
	dir := t.TempDir()
	// These tests are about networks: each computer's disk quota (a loop
	// device and two helper runs) is left to providers/docker's quota tests.
	env := []string{"COMPUTER_MEMORY_MB=128", "COMPUTER_DISK_MB=0", "COMPUTER_TOKEN_SECRET=two-supervisors-subnets-0123456789abcdef"}
	a := runSupervisorArgs(t, dir, []string{"--store", url}, env...)
	b := runSupervisorArgs(t, dir, []string{"--store", url}, env...)
	dep := a.deployment()
	t.Cleanup(func() { removeDeployment("deployment=" + dep) })
	var wg sync.WaitGroup
	wg.Go(func() { startMany(t, a, "sa", each, 20) })
	wg.Go(func() { startMany(t, b, "sb", each, 20) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	all := engineSubnets(t) // fails on any overlap
	nets := computerSubnets(t, all, a)
	maps.Copy(nets, computerSubnets(t, all, b))
	if got := len(nets); got < 2*each {
		t.Fatalf("%d computer networks for %d computers", got, 2*each)
	}
	var sw sync.WaitGroup
	sw.Go(func() { stopMany(t, a, "sa", each, 20) })
	sw.Go(func() { stopMany(t, b, "sb", each, 20) })
	sw.Wait()
	waitGone(t, dep)
}

// TestKilledDeploymentCollected: a supervisor killed with SIGKILL whose data
// folder is then deleted never comes back. An unrelated `berth dev` on the
// same engine removes its computers, networks and volumes once their lease
// and grace have passed, and leaves its own live computer alone.
func TestKilledDeploymentCollected(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	dirA := t.TempDir()
	a := runSupervisor(t, dirA, "COMPUTER_GRACE_SECONDS=2", "COMPUTER_NETWORK_POOL=0")
	first := time.Now()
	for i := range 3 {
		id := fmt.Sprintf("gone%d", i)
		a.must("POST", "/v1/agents", map[string]any{"id": id, "name": id}, 201, nil)
		a.must("POST", "/v1/computers", map[string]any{"agent": id, "provider": "docker", "leaseSeconds": 60, "dailySeconds": 600}, 201, nil)
		a.must("POST", "/v1/agents/"+id+"/computer/start", nil, 200, nil)
	}
	created := time.Now()
	depA := a.deployment()
	t.Cleanup(func() { removeDeployment("deployment=" + depA) })
	if c := countContainers(t, depA); c != 3 {
		t.Fatalf("%d containers, want 3", c)
	}
	a.kill()
	if err := os.RemoveAll(dirA); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	token := "collector-dev-token-0123456789"
	env := append(os.Environ(),
		"SUPERVISOR_TOKEN="+token, "COMPUTER_IMAGE_HEADLESS=berth/test:latest", "COMPUTER_IMAGE_DESKTOP=berth/test:latest",
		"EGRESS_LISTEN=off", "TURN_LISTEN=off", "COMPUTER_NETWORK_POOL=0", "COMPUTER_GRACE_SECONDS=2",
		"BERTH_CONFIG_DIR="+filepath.Join(dir, "config"), "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(dir, "no-bus"))
	dev := startProc(t, ctx, env, "dev", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "dev"), "--relay-listen", "127.0.0.1:0")
	url := dev.waitLine(t, regexp.MustCompile(`ready at (http://\S+)`))
	s := &super{t: t, url: url, token: token}
	s.must("POST", "/v1/agents", map[string]any{"id": "live", "name": "live"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "live", "provider": "docker"}, 201, nil)
	var live session
	s.must("POST", "/v1/agents/live/computer/start", nil, 200, &live)
	liveContainer := "berth-c-" + strings.TrimPrefix(live.ID, "s_")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", liveContainer).Run() })

	// Gone after their time (lease 60 s, grace 2 s), not before.
	const life = 62 * time.Second
	deadline := created.Add(life + 30*time.Second)
	for deploymentObjects(t, depA) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the dead deployment's objects are still there %v after their time: %s", time.Since(created.Add(life)).Round(time.Second), deploymentObjects(t, depA))
		}
		time.Sleep(time.Second)
	}
	if gone := time.Since(first); gone < life-time.Second {
		t.Fatalf("the dead deployment's computers were removed %v after they started, before their lease and grace (%v)", gone, life)
	}
	t.Logf("the dead deployment's computers were removed %v after their lease and grace", time.Since(created.Add(life)).Round(time.Second))
	if x := s.exec("live", "echo still here"); x.Stdout != "still here\n" {
		t.Fatalf("the live computer of berth dev: %+v", x)
	}
	s.must("POST", "/v1/agents/live/computer/stop", nil, 200, nil)
}
