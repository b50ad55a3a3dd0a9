package storetest

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// testConcurrentReserve runs 200 reservations at once for 50 agents, then
// drains every agent's budget with 4 competing starters each.
func testConcurrentReserve(t *testing.T, s store.Store) {
	ctx := testContext(t)
	const agents, perAgent, lease, daily = 50, 4, 300, 1000
	names := make([]string, agents)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
		connect(t, s, names[i], fmt.Sprintf("ws%d", i%3), "docker", lease, daily)
	}

	// Round 1: exactly one of each agent's four starts wins; the others
	// see ErrLive with the winner's session.
	type result struct {
		x   store.Session
		err error
	}
	results := make([]result, agents*perAgent)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			x, err := s.Reserve(ctx, reservation(names[i%agents], fmt.Sprintf("r1-%03d", i), t0))
			results[i] = result{x, err}
		})
	}
	close(start)
	wg.Wait()
	winners := map[string]store.Session{}
	for i, r := range results {
		if r.err == nil {
			if w, dup := winners[r.x.AgentID]; dup {
				t.Fatalf("agent %s got two live sessions: %s and %s", r.x.AgentID, w.ID, r.x.ID)
			}
			winners[r.x.AgentID] = r.x
		} else if !errors.Is(r.err, store.ErrLive) {
			t.Fatalf("reservation %d: %v", i, r.err)
		}
	}
	if len(winners) != agents {
		t.Fatalf("%d agents got a session, want %d", len(winners), agents)
	}
	for i, r := range results {
		if r.err != nil {
			if w := winners[names[i%agents]]; r.x.ID != w.ID {
				t.Errorf("reservation %d: ErrLive with session %q, want the winner %s", i, r.x.ID, w.ID)
			}
		}
	}
	total := 0
	for _, name := range names {
		b := budget(t, s, name, t0)
		total += b.ReservedSeconds
		checkBudget(t, b, "2026-03-10", daily, 0, lease, daily-lease)
		if t.Failed() {
			t.FailNow()
		}
	}
	if total != agents*lease {
		t.Errorf("reserved %d s in all, want %d", total, agents*lease)
	}
	starting, err := s.SessionsByState(ctx, store.StateStarting)
	if err != nil {
		t.Fatal(err)
	}
	if len(starting) != agents {
		t.Errorf("%d sessions starting, want %d", len(starting), agents)
	}
	// Each winner stops at once, unused: all its time comes back.
	for _, name := range names {
		w := winners[name]
		end(t, s, &w, 0, t0)
	}

	// Round 2: four starters per agent take sessions and use them fully
	// until the budget refuses. Together they must get exactly the daily
	// budget: 300 + 300 + 300 + 100.
	type drained struct {
		grants []int
		left   []int
	}
	var mu sync.Mutex
	got := map[string]*drained{}
	for _, name := range names {
		got[name] = &drained{}
	}
	start = make(chan struct{})
	for i := range agents * perAgent {
		name := names[i%agents]
		wg.Go(func() {
			<-start
			for n := 0; ; n++ {
				if ctx.Err() != nil {
					t.Errorf("starter %d of %s: %v", i, name, ctx.Err())
					return
				}
				x, err := s.Reserve(ctx, reservation(name, fmt.Sprintf("r2-%03d-%d", i, n), at(time.Minute)))
				var be *store.BudgetError
				switch {
				case err == nil:
					x.ChargedSeconds = x.ReservedSeconds
					x.State = store.StateStopping
					if err := s.UpdateSession(ctx, x, store.StateStarting); err != nil {
						t.Errorf("stop %s: %v", x.ID, err)
						return
					}
					x.State = store.StateStopped
					if err := s.UpdateSession(ctx, x, store.StateStopping); err != nil {
						t.Errorf("stop %s: %v", x.ID, err)
						return
					}
					mu.Lock()
					got[name].grants = append(got[name].grants, x.ReservedSeconds)
					mu.Unlock()
				case errors.Is(err, store.ErrLive):
					runtime.Gosched()
				case errors.As(err, &be):
					mu.Lock()
					got[name].left = append(got[name].left, be.LeftSeconds)
					mu.Unlock()
					return
				default:
					t.Errorf("starter %d of %s: %v", i, name, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, name := range names {
		d := got[name]
		sort.Ints(d.grants)
		if fmt.Sprint(d.grants) != "[100 300 300 300]" {
			t.Errorf("%s was granted %v, want [100 300 300 300]", name, d.grants)
		}
		if fmt.Sprint(d.left) != "[0 0 0 0]" {
			t.Errorf("%s's starters were refused with %v s left, want [0 0 0 0]", name, d.left)
		}
		checkBudget(t, budget(t, s, name, at(time.Hour)), "2026-03-10", daily, daily, 0, 0)
	}
	rows, err := s.Usage(ctx, "provider", t0, at(time.Hour), at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Seconds != agents*daily || rows[0].Sessions != agents*(1+4) {
		t.Errorf("usage %v, want docker with %d s in %d sessions", rows, agents*daily, agents*5)
	}
}

func testConcurrentBeginCall(t *testing.T, s store.Store) {
	ctx := testContext(t)
	const callers = 50
	type result struct {
		c       store.Call
		created bool
		err     error
	}
	results := make([]result, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			c, created, err := s.BeginCall(ctx, store.Call{Key: "a1/retry", AgentID: "a1", Tool: "computer_start",
				RequestHash: fmt.Sprintf("h%d", i), Owner: fmt.Sprintf("sup-%d", i), CreatedAt: t0})
			results[i] = result{c, created, err}
		})
	}
	close(start)
	wg.Wait()
	creator := -1
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("caller %d: %v", i, r.err)
		}
		if r.created {
			if creator >= 0 {
				t.Fatalf("callers %d and %d both created the call", creator, i)
			}
			creator = i
		}
	}
	if creator < 0 {
		t.Fatal("no caller created the call")
	}
	owner := fmt.Sprintf("sup-%d", creator)
	for i, r := range results {
		if r.c.Owner != owner || r.c.RequestHash != fmt.Sprintf("h%d", creator) {
			t.Errorf("caller %d got owner %s hash %s, want the creator's %s", i, r.c.Owner, r.c.RequestHash, owner)
		}
	}
	if err := s.FinishCall(ctx, "a1/retry", owner, 201, []byte("{}"), at(time.Second)); err != nil {
		t.Errorf("the creator could not finish: %v", err)
	}
}
