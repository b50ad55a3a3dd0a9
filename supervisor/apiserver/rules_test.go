package apiserver_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// TestConcurrentStarts sends 200 starts across 50 agents at once: each agent
// ends with exactly one session, one machine, and a reservation within its
// budget.
func TestConcurrentStarts(t *testing.T) {
	e := newEnv(t)
	const agents, starts = 50, 200
	for i := range agents {
		e.connect(fmt.Sprintf("c%02d", i), 300, 600)
	}
	var wg sync.WaitGroup
	ids := make([]string, starts)
	statuses := make([]int, starts)
	for i := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s supervisor.SessionView
			statuses[i], _ = e.call("POST", fmt.Sprintf("/v1/agents/c%02d/computer/start", i%agents), nil, &s)
			ids[i] = s.ID
		}()
	}
	wg.Wait()
	byAgent := map[int]string{}
	for i := range starts {
		if statuses[i] != 200 {
			t.Fatalf("start %d: status %d", i, statuses[i])
		}
		a := i % agents
		if prev, ok := byAgent[a]; ok && prev != ids[i] {
			t.Fatalf("agent c%02d got two sessions: %s and %s", a, prev, ids[i])
		}
		byAgent[a] = ids[i]
	}
	if c, _ := e.fake.Counts(); c != agents {
		t.Fatalf("creates = %d, want %d", c, agents)
	}
	for i := range agents {
		b, err := e.st.Budget(context.Background(), fmt.Sprintf("c%02d", i), e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if b.ReservedSeconds != 300 || b.UsedSeconds != 0 || b.LeftSeconds != 300 {
			t.Fatalf("agent c%02d budget %+v", i, b)
		}
	}
}

// TestRandomSequences runs random starts, stops, clock moves, expiries and
// midnights against several agents, checking after every step that no
// budget is overspent, no agent has two live sessions, and usage adds up.
func TestRandomSequences(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			e := newEnv(t)
			rng := rand.New(rand.NewPCG(seed, seed*7919))
			agents := []string{"p0", "p1", "p2"}
			leases := map[string]int{}
			dailies := map[string]int{}
			for _, a := range agents {
				lease := 60 + rng.IntN(4)*60
				daily := lease + rng.IntN(5)*120
				leases[a], dailies[a] = lease, daily
				e.connect(a, lease, daily)
			}
			for step := 0; step < 120; step++ {
				a := agents[rng.IntN(len(agents))]
				switch op := rng.IntN(10); {
				case op < 4:
					st, code := e.call("POST", "/v1/agents/"+a+"/computer/start", nil, nil)
					if st != 200 && code != supervisor.CodeBudget {
						t.Fatalf("step %d start %s: %d %s", step, a, st, code)
					}
				case op < 6:
					st, code := e.call("POST", "/v1/agents/"+a+"/computer/stop", nil, nil)
					if st != 200 && code != supervisor.CodeNoSession {
						t.Fatalf("step %d stop %s: %d %s", step, a, st, code)
					}
				case op < 9:
					e.clock.Advance(time.Duration(rng.IntN(200)) * time.Second)
					e.svc.Reap(context.Background())
				default:
					now := e.clock.Now()
					e.clock.Set(store.NextMidnight(now).Add(time.Duration(rng.IntN(30)) * time.Second))
					e.svc.Reap(context.Background())
				}
				checkInvariants(t, e, agents, dailies, step)
			}
		})
	}
}

func checkInvariants(t *testing.T, e *env, agents []string, dailies map[string]int, step int) {
	t.Helper()
	ctx := context.Background()
	now := e.clock.Now()
	var charged int64
	for _, a := range agents {
		b, err := e.st.Budget(ctx, a, now)
		if err != nil {
			t.Fatal(err)
		}
		if b.UsedSeconds+b.ReservedSeconds > dailies[a] {
			t.Fatalf("step %d: %s overspent: used %d + reserved %d > daily %d", step, a, b.UsedSeconds, b.ReservedSeconds, dailies[a])
		}
		if b.LeftSeconds != dailies[a]-b.UsedSeconds-b.ReservedSeconds {
			t.Fatalf("step %d: %s budget does not add up: %+v", step, a, b)
		}
	}
	all, err := e.st.SessionsByState(ctx, store.StateStarting, store.StateRunning, store.StateStopping,
		store.StateStopped, store.StateExpired, store.StateUncertain, store.StateCleanupFailed)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]int{}
	for _, x := range all {
		if store.Live(x.State) {
			live[x.AgentID]++
			if live[x.AgentID] > 1 {
				t.Fatalf("step %d: %s has two live sessions", step, x.AgentID)
			}
			charged += int64(earliest(now, x.ExpiresAt).Sub(x.CreatedAt) / time.Second)
		} else {
			if x.ChargedSeconds > x.ReservedSeconds || x.EndedAt.After(x.ExpiresAt) {
				t.Fatalf("step %d: session %s charged %d of %d, ended %v after expiry %v", step, x.ID, x.ChargedSeconds, x.ReservedSeconds, x.EndedAt, x.ExpiresAt)
			}
			charged += int64(x.ChargedSeconds)
		}
	}
	rows, err := e.st.Usage(ctx, "provider", time.Time{}.Add(time.Millisecond), now.Add(time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, r := range rows {
		total += r.Seconds
	}
	if total != charged {
		t.Fatalf("step %d: usage %d s, sessions add up to %d s", step, total, charged)
	}
	// Every machine the provider holds belongs to a live session.
	ms, _ := e.fake.List(ctx)
	if len(ms) != len(live) {
		t.Fatalf("step %d: %d machines for %d live sessions", step, len(ms), len(live))
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestDeleteWorkspaceWaitsForCleanup deletes a workspace whose computer's
// cleanup keeps failing: the delete is refused and the credentials stay
// until the cleanup is done, then a retry removes the agents.
func TestDeleteWorkspaceWaitsForCleanup(t *testing.T) {
	e := newEnv(t)
	e.connect("w1", 300, 3600) // workspace ws-w1
	e.mustCall("POST", "/v1/agents/w1/computer/start", nil, 200, nil)
	e.fake.SetFaults(fake.Faults{FailDestroys: 3})
	if st, code := e.call("DELETE", "/v1/workspaces/ws-w1", nil, nil); st != 409 || code != "conflict" {
		t.Fatalf("delete with pending cleanup: %d %s", st, code)
	}
	if _, err := e.st.GetConnection(context.Background(), "w1"); err != nil {
		t.Fatalf("credentials removed before the cleanup: %v", err)
	}
	for range 3 {
		e.clock.Advance(10 * time.Minute)
		e.svc.Reap(context.Background())
	}
	if ms, _ := e.fake.List(context.Background()); len(ms) != 0 {
		t.Fatalf("machine left: %v", ms)
	}
	e.mustCall("DELETE", "/v1/workspaces/ws-w1", nil, 200, nil)
	if _, err := e.st.GetAgent(context.Background(), "w1"); err == nil {
		t.Fatal("agent kept after the workspace was deleted")
	}
	if st, _ := e.call("DELETE", "/v1/workspaces/ws-w1", nil, nil); st != 404 {
		t.Fatalf("second delete: %d", st)
	}
}
