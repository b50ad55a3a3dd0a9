package lender

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/internal/warmpool"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// uniqueAgent is an agent id of its own for this run: another run of the
// same tests on the same engine never takes its computers for leftovers.
func uniqueAgent(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// containers lists the names of the containers an agent's deployment has
// on the engine; pool limits them to those waiting in a warm pool.
func containers(t testing.TB, agent string, pool bool) []string {
	t.Helper()
	args := []string{"ps", "-a", "--filter", "label=" + providers.LabelDeployment + "=" + Deployment(agent), "--format", "{{.Names}}"}
	if pool {
		args = append(args, "--filter", "label="+providers.LabelPool+"=true")
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	names := strings.Fields(string(out))
	slices.Sort(names)
	return names
}

// removeDeployment removes, when the test ends, everything on the engine
// carrying the agent's deployment label: computers the pool made have ids
// the test never learns in advance.
func removeDeployment(t testing.TB, agent string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		d, err := docker.New(docker.Options{HeadlessImage: testImage})
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		ms, err := d.List(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for _, m := range ms {
			if m.Labels[providers.LabelDeployment] == Deployment(agent) {
				if err := d.Destroy(ctx, m.ID); err != nil {
					t.Errorf("cleanup %s: %v", m.ID, err)
				}
			}
		}
	})
}

// waiting lists the containers waiting in r's pool: pool computers that
// no session claimed (labels cannot change, so a claimed one keeps its
// pool label).
func waiting(t testing.TB, r *rig) []string {
	t.Helper()
	var out []string
	for _, name := range containers(t, r.agent, true) {
		if !slices.ContainsFunc(r.l.Computers(), func(c lending.Computer) bool { return c.MachineID == name }) {
			out = append(out, name)
		}
	}
	return out
}

// waitPool waits until the pool holds want waiting computers and makes
// none, and returns the names of its containers on the engine. While the
// pool has nothing in flight it steps the rig's clock by the pool's
// interval, as time would move: the pool passes again.
func waitPool(t testing.TB, ctx context.Context, r *rig, want int) []string {
	t.Helper()
	for {
		st := r.l.pool.Stats()
		if st.Waiting == want && st.Creating == 0 {
			if names := waiting(t, r); len(names) == want {
				return names
			}
		}
		if st.Creating == 0 && st.Removing == 0 {
			r.clk.Advance(warmpool.Interval)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pool: %+v, containers %v; want %d waiting", r.l.PoolStatus(), waiting(t, r), want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// syncPool waits until a pass of the pool that began after the call has
// run, and what it started has ended.
func syncPool(t testing.TB, ctx context.Context, r *rig) {
	t.Helper()
	if err := r.l.pool.Sync(ctx); err != nil {
		t.Fatalf("pool pass: %v", err)
	}
	for st := r.l.pool.Stats(); st.Creating > 0 || st.Removing > 0; st = r.l.pool.Stats() {
		select {
		case <-ctx.Done():
			t.Fatalf("pool: %+v; want nothing in flight", st)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestWarmPool runs the warm pool of a lent machine on the real engine: a
// start runs in the computer that was waiting and is in the ledger, the
// bind secret is refused afterwards, the pool refills within the owner's
// limit (waiting computers count), a cold start makes room, settings
// changes and lending off empty it, it shrinks under memory pressure, a
// restarted agent removes what an earlier run left waiting, and shutdown
// removes what waits.
func TestWarmPool(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 3*time.Minute)
	agent := uniqueAgent("cp_pool")
	removeDeployment(t, agent)
	r := newRig(t, agent, "", nil)
	r.set(func(s *control.Settings) { s.MaxComputers = 3; s.WarmPoolSize = 2 })
	if _, err := r.l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	before := waitPool(t, ctx, r, 2)
	secrets := map[string]string{}
	for _, m := range r.l.pool.Members() {
		secrets[m.machine] = m.secret
	}

	// A start claims a waiting computer.
	req, tok := request("pooled")
	destroyAll(t, req.ComputerID)
	c, err := r.l.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(before, c.MachineID) {
		t.Fatalf("start ran in %s, not in a waiting computer %v", c.MachineID, before)
	}
	if s, err := r.led.Get(ctx, req.ComputerID); err != nil || s.MachineID != c.MachineID || !s.Open() || s.Agent != "pooled" {
		t.Fatalf("ledger: %+v %v", s, err)
	}
	if st := r.l.PoolStatus(); st.Claimed != 1 {
		t.Fatalf("pool status: %+v", st)
	}
	run, _ := r.l.lookup(req.ComputerID)
	cl := computerd.NewClient(run.endpoint, tok)
	x, err := cl.Exec(ctx, computerd.ExecRequest{Command: "id -u; echo [$BERTH_BIND_SHA256]", TimeoutMs: 10000})
	if err != nil || x.ExitCode != 0 || x.Stdout != "1000\n[]\n" {
		t.Fatalf("exec in the claimed computer: %+v %v", x, err)
	}
	secret := secrets[c.MachineID]
	if _, err := computerd.NewClient(run.endpoint, secret).Bind(ctx, computerd.BindRequest{TokenHash: token.Hash("intruder")}); err == nil {
		t.Fatal("a second bind with the bind secret worked")
	}
	if _, err := computerd.NewClient(run.endpoint, secret).Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 5000}); err == nil {
		t.Fatal("the bind secret still runs commands after the bind")
	}
	// The supervisor names it by its container; the relay's path by its id.
	if cs := r.l.Computers(); len(cs) != 1 || cs[0].ComputerID != req.ComputerID || cs[0].Labels[providers.LabelComputer] != req.ComputerID {
		t.Fatalf("computers: %+v", cs)
	}

	// It refills: one running and two waiting make the owner's three.
	refilled := waitPool(t, ctx, r, 2)
	if slices.Contains(refilled, c.MachineID) {
		t.Fatalf("the used computer is back in the pool: %v", refilled)
	}
	// A second start leaves room for one waiting computer only.
	req2, _ := request("pooled")
	destroyAll(t, req2.ComputerID)
	if _, err := r.l.Create(ctx, req2); err != nil {
		t.Fatal(err)
	}
	waitPool(t, ctx, r, 1)
	syncPool(t, ctx, r) // a refill pass that would overfill has run
	if n := len(containers(t, agent, false)); n != 3 {
		t.Fatalf("%d containers for an owner's limit of 3: %v", n, containers(t, agent, false))
	}
	// A cold start (desktop) first removes the waiting computer that
	// would take it over the limit.
	req3, _ := request("pooled")
	req3.Image = providers.ImageDesktop
	destroyAll(t, req3.ComputerID)
	if c3, err := r.l.Create(ctx, req3); err != nil || c3.MachineID != docker.ContainerPrefix+req3.ComputerID {
		t.Fatalf("cold start: %+v %v", c3, err)
	}
	if n := containers(t, agent, false); len(n) != 3 || len(waiting(t, r)) != 0 {
		t.Fatalf("after a cold start at the limit: %v", n)
	}
	// A claim still passes the owner's limits.
	req4, _ := request("pooled")
	var le *lending.Error
	if _, err := r.l.Create(ctx, req4); !errors.As(err, &le) || le.Code != lending.CodeTooMany {
		t.Fatalf("a fourth computer: %v", err)
	}
	for _, id := range []string{req.ComputerID, req2.ComputerID, req3.ComputerID} {
		if err := r.l.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := r.led.Get(ctx, req.ComputerID); err != nil || s.Open() {
		t.Fatalf("ledger after the stop: %+v %v", s, err)
	}
	full := waitPool(t, ctx, r, 2)

	// A change of the settings empties the pool; it refills under the new ones.
	if _, err := r.l.UpdateSettings(control.SettingsUpdate{WarmPoolSize: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	if names := waiting(t, r); len(names) > 1 || (len(names) == 1 && slices.Contains(full, names[0])) {
		t.Fatalf("after a settings change the pool still holds %v (had %v)", names, full)
	}
	waitPool(t, ctx, r, 1)
	// Lending off empties it and keeps it empty.
	if _, err := r.l.UpdateSettings(control.SettingsUpdate{Lending: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	// A removal already under way when lending stopped may still be
	// finishing: wait (bounded) for the pool to be empty, then see that
	// it stays so.
	waitPool(t, ctx, r, 0)
	syncPool(t, ctx, r)
	if st, names := r.l.PoolStatus(), waiting(t, r); st.Waiting != 0 || st.Creating != 0 || len(names) != 0 {
		t.Fatalf("lending off, the pool refilled: %+v %v", st, names)
	}
	// Under memory pressure it shrinks.
	if _, err := r.l.UpdateSettings(control.SettingsUpdate{Lending: ptr(true), WarmPoolSize: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, ctx, r, 2)
	r.memLow.Store(true)
	waitPool(t, ctx, r, 0)
	r.memLow.Store(false)
	waitPool(t, ctx, r, 2)

	// Shutdown removes what waits.
	if err := r.l.Close(); err != nil {
		t.Fatal(err)
	}
	if names := containers(t, agent, false); len(names) != 0 {
		t.Fatalf("after shutdown: %v", names)
	}

	// A restarted agent removes computers an earlier run left waiting
	// (killed before it could remove them).
	d, err := docker.New(docker.Options{HeadlessImage: testImage})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := range 2 {
		if _, err := d.CreatePooled(ctx, providers.Spec{ComputerID: "pleft" + string(rune('a'+i)), Deployment: Deployment(agent)},
			token.Hash("lost secret")); err != nil {
			t.Fatal(err)
		}
	}
	r2 := newRig(t, agent, "", nil)
	r2.set(nil) // no pool
	rep, err := r2.l.Start(ctx)
	if err != nil || rep.Pool != 2 || rep.Prompts != 0 {
		t.Fatalf("restart: %+v %v", rep, err)
	}
	if names := containers(t, agent, false); len(names) != 0 {
		t.Fatalf("after the restart: %v", names)
	}
}

// TestWarmPoolConcurrentStarts: six starts at once against an owner's
// limit of three and a pool of two: three run (two from the pool, one
// cold), three are refused, and the engine never holds more than three of
// the agent's containers.
func TestWarmPoolConcurrentStarts(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	agent := uniqueAgent("cp_pool_many")
	removeDeployment(t, agent)
	r := newRig(t, agent, "", nil)
	r.set(func(s *control.Settings) { s.MaxComputers = 3; s.WarmPoolSize = 2 })
	if _, err := r.l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pooledNames := waitPool(t, ctx, r, 2)

	stopSampling := make(chan struct{})
	most := make(chan int, 1)
	go func() {
		n := 0
		for {
			if names := containers(t, agent, false); len(names) > n {
				n = len(names)
				t.Logf("containers: %v", names)
			}
			select {
			case <-stopSampling:
				most <- n
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	type result struct {
		c   lending.Computer
		err error
	}
	results := make(chan result, 6)
	for range 6 {
		req, _ := request("many")
		destroyAll(t, req.ComputerID)
		go func() {
			c, err := r.l.Create(ctx, req)
			results <- result{c, err}
		}()
	}
	var ran []lending.Computer
	refused := 0
	for range 6 {
		res := <-results
		var le *lending.Error
		switch {
		case res.err == nil:
			ran = append(ran, res.c)
		case errors.As(res.err, &le) && le.Code == lending.CodeTooMany:
			refused++
		default:
			t.Errorf("start: %v", res.err)
		}
	}
	syncPool(t, ctx, r) // a refill pass that would overfill has run
	close(stopSampling)
	if n := <-most; n > 3 {
		t.Errorf("the engine held %d of the agent's containers at once; the owner allows 3", n)
	}
	fromPool := 0
	for _, c := range ran {
		if slices.Contains(pooledNames, c.MachineID) {
			fromPool++
		}
	}
	if len(ran) != 3 || refused != 3 || fromPool != 2 {
		t.Fatalf("%d ran (%d from the pool), %d refused; want 3 (2), 3", len(ran), fromPool, refused)
	}
	if n := len(containers(t, agent, false)); n != 3 {
		t.Fatalf("%d containers after the starts", n)
	}
	for _, c := range ran {
		if err := r.l.Destroy(ctx, c.MachineID); err != nil { // by its container, as the supervisor names it
			t.Fatal(err)
		}
		if s, err := r.led.Get(ctx, c.ComputerID); err != nil || s.Open() {
			t.Fatalf("ledger after the stop of %s: %+v %v", c.ComputerID, s, err)
		}
	}
}

// TestWarmPoolRestartAdoptsClaimed: a computer claimed from the pool (its
// container named after its pool id) is adopted by a restarted agent,
// survives a resync, and is stopped by its container's name with its
// ledger row closed.
func TestWarmPoolRestartAdoptsClaimed(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	agent := uniqueAgent("cp_pool_restart")
	removeDeployment(t, agent)
	dir := t.TempDir()
	r := newRig(t, agent, dir, nil)
	r.set(func(s *control.Settings) { s.WarmPoolSize = 1 })
	if _, err := r.l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitPool(t, ctx, r, 1)
	req, tok := request("restart")
	c, err := r.l.Create(ctx, req)
	if err != nil || c.MachineID == docker.ContainerPrefix+req.ComputerID {
		t.Fatalf("claim: %+v %v", c, err)
	}
	r.l.Close()
	if names := containers(t, agent, false); len(names) != 1 || names[0] != c.MachineID {
		t.Fatalf("after the agent stopped: %v, want only %s", names, c.MachineID)
	}

	r2 := newRig(t, agent, dir, r.clk)
	rep, err := r2.l.Start(ctx)
	if err != nil || rep.Adopted != 1 || rep.Pool != 0 || rep.Prompts != 0 || rep.Cleaned != 0 {
		t.Fatalf("restart: %+v %v", rep, err)
	}
	if err := r2.l.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	run, err := r2.l.lookup(req.ComputerID)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := computerd.NewClient(run.endpoint, tok).Exec(ctx, computerd.ExecRequest{Command: "echo adopted", TimeoutMs: 10000}); err != nil || x.Stdout != "adopted\n" {
		t.Fatalf("exec after the restart: %+v %v", x, err)
	}
	if err := r2.l.Destroy(ctx, c.MachineID); err != nil {
		t.Fatal(err)
	}
	if s, err := r2.led.Get(ctx, req.ComputerID); err != nil || s.Open() {
		t.Fatalf("ledger: %+v %v", s, err)
	}
	if names := containers(t, agent, false); slices.Contains(names, c.MachineID) {
		t.Fatalf("after the stop: %v", names)
	}
}

// TestWarmPoolAllowedHours: outside the owner's allowed hours the pool
// holds nothing; inside them it fills, and it empties again when they end.
func TestWarmPoolAllowedHours(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	agent := uniqueAgent("cp_pool_hours")
	removeDeployment(t, agent)
	r := newRig(t, agent, "", nil) // Monday 10:00 in Berlin
	r.set(func(s *control.Settings) { s.WarmPoolSize = 1; s.Hours = control.Hours{From: "12:00", To: "13:00"} })
	if _, err := r.l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	syncPool(t, ctx, r)
	if st := r.l.PoolStatus(); st.Waiting != 0 || st.Creating != 0 || len(waiting(t, r)) != 0 {
		t.Fatalf("outside the allowed hours: %+v", st)
	}
	r.clk.Advance(2*time.Hour + 30*time.Minute) // 12:30
	waitPool(t, ctx, r, 1)
	r.clk.Advance(time.Hour) // 13:30
	waitPool(t, ctx, r, 0)
}
