package lender

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// TestLendAndRestart runs computers on the real engine: one made through
// the lender's API (whose computerd answers through the proxy), one left by
// an ended session, one the ledger never knew, and one of another agent on
// the same engine. A restarted lender adopts the first, removes the
// second, lists the third's container, volume and network as cleanup
// prompts, and leaves the other agent's alone. The adopted computer is
// removed by the lender itself once its lease and the grace are over.
func TestLendAndRestart(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()
	r := newRig(t, "cp_restart", dir, nil)
	r.set(nil)

	// A computer made through the API, as the supervisor makes it.
	req, tok := request("agent-1")
	destroyAll(t, req.ComputerID)
	srv := httptest.NewServer(r.l.Handler())
	defer srv.Close()
	body, _ := json.Marshal(req)
	resp, err := http.Post(srv.URL+lending.PathComputers, "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var c lending.Computer
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || c.MachineID != docker.ContainerPrefix+req.ComputerID ||
		c.Labels[providers.LabelDeployment] != "dep-test" || c.Labels[providers.LabelAttempt] != req.AttemptID {
		t.Fatalf("create: %d %+v", resp.StatusCode, c)
	}
	// The container carries this agent's own deployment label.
	if out, _ := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "dev.berth.deployment"}}`, c.MachineID).Output(); strings.TrimSpace(string(out)) != Deployment("cp_restart") {
		t.Fatalf("container deployment label %q", out)
	}
	cd := computerd.NewClient(srv.URL+lending.EndpointPath(req.ComputerID), tok)
	testkit.EventuallyContext(t, ctx, "computerd to answer", healthy(ctx, cd))
	res, err := cd.Exec(ctx, computerd.ExecRequest{Command: "echo lent", TimeoutMs: 10000})
	if err != nil || strings.TrimSpace(res.Stdout) != "lent" {
		t.Fatalf("exec through the proxy: %+v %v", res, err)
	}
	// A second create of the same attempt returns the same computer.
	if again, err := r.l.Create(ctx, req); err != nil || again.MachineID != c.MachineID {
		t.Fatalf("repeated create: %+v %v", again, err)
	}

	// Leftovers made straight with the docker provider: one of an ended
	// session, one the ledger never had, one of another agent.
	d, err := docker.New(docker.Options{HeadlessImage: testImage, MemoryMB: 256, DiskMB: docker.NoDiskLimit})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mk := func(deployment string) string {
		id := newComputerID()
		destroyAll(t, id)
		_, err := d.Create(ctx, providers.Spec{ComputerID: id, SessionID: "s_" + id, AttemptID: "a_" + id, AgentID: "agent-x",
			Deployment: deployment, Image: "headless", TokenHash: token.Hash("x")})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ended := mk(Deployment("cp_restart"))
	if err := r.led.Begin(ctx, ledger.Session{ComputerID: ended, SessionID: "s", AttemptID: "a", Agent: "agent-x", Workspace: "w",
		Image: "headless", Deployment: "dep-test", Day: "2026-11-30", StartedAt: monday10.Add(-time.Hour), ExpiresAt: monday10}); err != nil {
		t.Fatal(err)
	}
	r.led.End(ctx, ended, monday10.Add(-30*time.Minute), "stopped")
	unknown := mk(Deployment("cp_restart"))
	other := mk(Deployment("cp_someone_else"))

	// The agent stops; its computer keeps running; a new one starts.
	r.l.Close()
	r2 := newRig(t, "cp_restart", dir, r.clk)
	rep, err := r2.l.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Adopted != 1 || rep.Cleaned != 1 || rep.Prompts != 3 {
		t.Fatalf("report %+v, want 1 adopted, 1 cleaned, 3 prompts", rep)
	}
	if cs := r2.l.Computers(); len(cs) != 1 || cs[0].ComputerID != req.ComputerID {
		t.Fatalf("computers after restart: %+v", cs)
	}
	if exists(c.MachineID) != true || exists(docker.ContainerPrefix+ended) || !exists(docker.ContainerPrefix+other) {
		t.Fatalf("after restart: adopted %v, ended %v, other agent's %v",
			exists(c.MachineID), exists(docker.ContainerPrefix+ended), exists(docker.ContainerPrefix+other))
	}
	prompts := r2.l.Cleanups()
	var kinds []string
	for _, p := range prompts {
		if p.Computer != unknown || p.State != control.CleanupOpen || p.Reason == "" {
			t.Fatalf("prompt %+v", p)
		}
		kinds = append(kinds, p.Kind+"="+p.Name)
	}
	slices.Sort(kinds)
	want := []string{"container=" + docker.ContainerPrefix + unknown, "network=" + docker.NetworkPrefix + unknown, "volume=" + docker.VolumePrefix + unknown}
	if !slices.Equal(kinds, want) {
		t.Fatalf("prompts %v, want %v", kinds, want)
	}
	byKind := map[string]control.CleanupPrompt{}
	for _, p := range prompts {
		byKind[p.Kind] = p
	}
	if _, err := r2.l.ResolveCleanup(ctx, byKind[control.KindContainer].ID, true); err != nil {
		t.Fatal(err)
	}
	if p, err := r2.l.ResolveCleanup(ctx, byKind[control.KindVolume].ID, false); err != nil || p.State != control.CleanupKept {
		t.Fatalf("keep: %+v %v", p, err)
	}
	if _, err := r2.l.ResolveCleanup(ctx, byKind[control.KindNetwork].ID, true); err != nil {
		t.Fatal(err)
	}
	if exists(docker.ContainerPrefix+unknown) || !volumeExists(docker.VolumePrefix+unknown) {
		t.Fatal("remove took the container, keep left the volume: not so")
	}
	if n := len(r2.l.Cleanups()); n != 0 {
		t.Fatalf("%d prompts left", n)
	}

	// The adopted computer still answers, with the same token.
	srv2 := httptest.NewServer(r2.l.Handler())
	defer srv2.Close()
	cd2 := computerd.NewClient(srv2.URL+lending.EndpointPath(req.ComputerID), tok)
	if res, err := cd2.Exec(ctx, computerd.ExecRequest{Command: "echo still", TimeoutMs: 10000}); err != nil || strings.TrimSpace(res.Stdout) != "still" {
		t.Fatalf("exec after adoption: %+v %v", res, err)
	}

	// A third start remembers the kept volume and asks nothing.
	r2.l.Close()
	r3 := newRig(t, "cp_restart", dir, r.clk)
	if rep, err := r3.l.Start(ctx); err != nil || rep.Prompts != 0 || rep.Adopted != 1 {
		t.Fatalf("third start: %+v %v", rep, err)
	}
	// Past the lease and the grace, the lender removes the computer.
	r3.clk.Advance(15*time.Minute + DefaultExpiryGrace + time.Second)
	var s ledger.Session
	testkit.EventuallyContext(t, ctx, "the session closed in the ledger", func() bool {
		s, err = r3.led.Get(ctx, req.ComputerID)
		return err != nil || !s.Open()
	})
	if exists(c.MachineID) {
		t.Fatal("expired computer still there")
	}
	if err != nil || s.Open() || s.EndReason != "expired" || s.Seconds != 900 {
		t.Fatalf("ledger after expiry: %+v %v", s, err)
	}
	exec.Command("docker", "volume", "rm", "-f", docker.VolumePrefix+unknown).Run()
}

// healthy reports whether computerd answers through c.
func healthy(ctx context.Context, c *computerd.Client) func() bool {
	return func() bool { _, err := c.Health(ctx); return err == nil }
}

func exists(container string) bool {
	return exec.Command("docker", "container", "inspect", container).Run() == nil
}

func volumeExists(v string) bool {
	return exec.Command("docker", "volume", "inspect", v).Run() == nil
}

// TestResyncClosesVanished: a computer removed behind the agent's back
// (while the relay was away, say) is closed when the agent resyncs.
func TestResyncClosesVanished(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	r := newRig(t, "cp_resync", "", nil)
	r.set(nil)
	req, _ := request("agent-1")
	destroyAll(t, req.ComputerID)
	c, err := r.l.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("docker", "rm", "-f", c.MachineID).Run(); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(2 * time.Minute)
	if err := r.l.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(r.l.Computers()); n != 0 {
		t.Fatalf("%d computers after resync", n)
	}
	s, err := r.led.Get(ctx, req.ComputerID)
	if err != nil || s.Open() || s.EndReason != "computer gone" || s.Seconds != 120 {
		t.Fatalf("ledger: %+v %v", s, err)
	}
}
