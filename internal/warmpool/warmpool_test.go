package warmpool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/warmpool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type member struct {
	id   string
	made time.Time
}

// rig is a pool of members on a fake clock; creates take what gate
// lets through (nil: no wait) and fail while fail is set.
type rig struct {
	t    *testing.T
	ctx  context.Context
	clk  *clock.Fake
	p    *warmpool.Pool[member]
	size atomic.Int64
	// lo and hi, when hi is set, size the pool to its demand
	// (Pool.Size) instead of size.
	lo, hi atomic.Int64
	room   atomic.Int64
	free   atomic.Int64 // percent of memory available
	fail   atomic.Bool
	gate   chan struct{}

	mu      sync.Mutex
	made    int
	removed []string
}

func newRig(t *testing.T, size int, gate chan struct{}, setup ...func(*rig)) *rig {
	return newRigWith(t, size, gate, nil, setup...)
}

// newRigWith is newRig with configure changing the pool's Config first.
func newRigWith(t *testing.T, size int, gate chan struct{}, configure func(*warmpool.Config[member]), setup ...func(*rig)) *rig {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	r := &rig{t: t, ctx: ctx, clk: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), gate: gate}
	r.size.Store(int64(size))
	r.room.Store(warmpool.Unlimited)
	r.free.Store(50)
	cfg := warmpool.Config[member]{
		Clock: r.clk, MaxWait: 30 * time.Minute,
		MemInfo: func() (uint64, uint64, error) { return uint64(r.free.Load()), 100, nil },
		Target: func(now time.Time, st warmpool.Stats) (int, int) {
			room := int(r.room.Load())
			if room != warmpool.Unlimited {
				room -= st.Waiting + st.Creating + st.Removing
			}
			if hi := int(r.hi.Load()); hi > 0 {
				return r.p.Size(now, int(r.lo.Load()), hi), room
			}
			return int(r.size.Load()), room
		},
		Create: func(ctx context.Context) (member, error) {
			if r.gate != nil {
				<-r.gate
			}
			if r.fail.Load() {
				return member{}, errors.New("no")
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.made++
			return member{id: fmt.Sprintf("m%d", r.made), made: r.clk.Now()}, nil
		},
		Remove: func(_ context.Context, m member, _ string) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.removed = append(r.removed, m.id)
			return true
		},
		ID:   func(m member) string { return m.id },
		Made: func(m member) time.Time { return m.made },
	}
	if configure != nil {
		configure(&cfg)
	}
	r.p = warmpool.New(cfg)
	for _, f := range setup {
		f(r)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.p.Run(run)
	}()
	t.Cleanup(func() {
		stop()
		if r.gate != nil {
			close(r.gate)
		}
		<-done
	})
	return r
}

// settle waits for a pass that began now and for what it started.
func (r *rig) settle() warmpool.Stats {
	r.t.Helper()
	if err := r.p.Sync(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	for {
		st := r.p.Stats()
		if st.Creating == 0 && st.Removing == 0 {
			// The creates' ends poked the pool: let that pass run too.
			if err := r.p.Sync(r.ctx); err != nil {
				r.t.Fatal(err)
			}
			if st2 := r.p.Stats(); st2 == st {
				return st
			}
			continue
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("pool never settled: %+v", st)
		case <-time.After(time.Millisecond):
		}
	}
}

func (r *rig) removedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.removed)
}

func TestFillsToSize(t *testing.T) {
	r := newRig(t, 3, nil)
	if st := r.settle(); st.Waiting != 3 || st.Creating != 0 {
		t.Fatalf("stats %+v, want 3 waiting", st)
	}
	// Fewer wanted: the oldest go.
	r.size.Store(1)
	if st := r.settle(); st.Waiting != 1 || len(r.removedIDs()) != 2 {
		t.Fatalf("stats %+v, removed %v", st, r.removedIDs())
	}
}

func TestCreators(t *testing.T) {
	gate := make(chan struct{})
	r := newRig(t, 5, gate)
	if err := r.p.Sync(r.ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.p.Stats(); st.Creating != warmpool.Creators {
		t.Fatalf("stats %+v, want %d creating", st, warmpool.Creators)
	}
}

func TestRoom(t *testing.T) {
	r := newRig(t, 5, nil)
	r.room.Store(3) // the user's limit; the rig's target counts the members in it
	if st := r.settle(); st.Waiting != 3 || st.Creating != 0 {
		t.Fatalf("stats %+v, want 3 waiting", st)
	}
}

func TestBackoff(t *testing.T) {
	r := newRig(t, 1, nil, func(r *rig) { r.fail.Store(true) })
	r.settle()
	r.mu.Lock()
	r.made = 0
	r.mu.Unlock()
	r.fail.Store(false)
	// Within the backoff nothing is made, however often the pool passes.
	r.clk.Advance(warmpool.MinBackoff / 2)
	if st := r.settle(); st.Waiting != 0 {
		t.Fatalf("made a computer during its backoff: %+v", st)
	}
	r.clk.Advance(warmpool.MinBackoff / 2)
	if st := r.settle(); st.Waiting != 1 {
		t.Fatalf("no computer after the backoff: %+v", st)
	}
}

func TestBackoffDoubles(t *testing.T) {
	r := newRig(t, 1, nil, func(r *rig) { r.fail.Store(true) })
	r.settle() // 1 s
	r.clk.Advance(time.Second)
	r.settle() // fails again: 2 s
	r.fail.Store(false)
	r.clk.Advance(time.Second)
	if st := r.settle(); st.Waiting != 0 {
		t.Fatalf("made a computer within the doubled backoff: %+v", st)
	}
	r.clk.Advance(time.Second)
	if st := r.settle(); st.Waiting != 1 {
		t.Fatalf("no computer after the doubled backoff: %+v", st)
	}
}

func TestRetiresOld(t *testing.T) {
	r := newRig(t, 2, nil)
	r.settle()
	first := r.p.Members()
	r.clk.Advance(30*time.Minute - time.Second)
	if st := r.settle(); st.Waiting != 2 || len(r.removedIDs()) != 0 {
		t.Fatalf("retired too early: %+v %v", st, r.removedIDs())
	}
	r.clk.Advance(time.Second)
	if st := r.settle(); st.Waiting != 2 || len(r.removedIDs()) != 2 {
		t.Fatalf("after 30 min: %+v, removed %v", st, r.removedIDs())
	}
	for _, m := range r.p.Members() {
		if slices.Contains(first, m) {
			t.Fatalf("%s still waits", m.id)
		}
	}
}

func TestClaim(t *testing.T) {
	r := newRig(t, 2, nil)
	r.settle()
	ms := r.p.Members()
	oldest := ms[0]
	for _, m := range ms {
		if m.made.Before(oldest.made) || (m.made.Equal(oldest.made) && m.id < oldest.id) {
			oldest = m
		}
	}
	m, ok := r.p.Claim()
	if !ok || !m.made.Equal(oldest.made) {
		t.Fatalf("claim: %+v %v, want the oldest %+v", m, ok, oldest)
	}
	if st := r.settle(); st.Claimed != 1 || st.Waiting != 2 {
		t.Fatalf("after a claim: %+v", st)
	}
	// A claim made by the user, of a member perhaps not waiting yet,
	// counts too.
	r.p.Claimed("m-offered")
	if st := r.p.Stats(); st.Claimed != 2 {
		t.Fatalf("claims: %+v", st)
	}
}

func TestClaimOld(t *testing.T) {
	gate := make(chan struct{}, 1)
	r := newRig(t, 1, gate)
	gate <- struct{}{}
	for r.p.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	// The clock moves past the member's longest wait before any pass:
	// no claim gets it.
	r.clk.Set(r.clk.Now().Add(30 * time.Minute))
	if _, ok := r.p.Claim(); ok {
		t.Fatal("claimed a member that waited its longest")
	}
}

func TestMemoryPressure(t *testing.T) {
	r := newRig(t, 2, nil)
	r.settle()
	r.free.Store(7) // no growth
	if _, ok := r.p.Claim(); !ok {
		t.Fatal("no claim")
	}
	if st := r.settle(); st.Waiting != 1 {
		t.Fatalf("grew at 7%% free: %+v", st)
	}
	r.free.Store(3) // shrink
	if st := r.settle(); st.Waiting != 0 {
		t.Fatalf("at 3%% free: %+v", st)
	}
	r.free.Store(40)
	if st := r.settle(); st.Waiting != 2 {
		t.Fatalf("at 40%% free: %+v", st)
	}
}

func TestDrain(t *testing.T) {
	gate := make(chan struct{}, 3)
	r := newRig(t, 3, gate)
	gate <- struct{}{}
	gate <- struct{}{}
	for r.p.Stats().Waiting != 2 {
		time.Sleep(time.Millisecond)
	}
	// A third create is in flight when the pool is drained.
	for r.p.Stats().Creating != 1 {
		time.Sleep(time.Millisecond)
	}
	r.size.Store(0)
	if n := r.p.Drain(r.ctx, "test"); n != 2 {
		t.Fatalf("drained %d, want 2", n)
	}
	gate <- struct{}{}
	if st := r.settle(); st.Waiting != 0 || len(r.removedIDs()) != 3 {
		t.Fatalf("after the drain: %+v, removed %v", st, r.removedIDs())
	}
}

func TestMakeRoom(t *testing.T) {
	r := newRig(t, 2, nil)
	r.settle()
	r.size.Store(0) // no refill behind
	limit := 1
	over := func(st warmpool.Stats) int { return st.Waiting + st.Creating + st.Removing - limit }
	if err := r.p.MakeRoom(r.ctx, "test", over); err != nil {
		t.Fatal(err)
	}
	if st := r.p.Stats(); st.Waiting+st.Removing > limit {
		t.Fatalf("after making room: %+v", st)
	}
}

// TestSizeFollowsDemand scripts bursts of starts on the fake clock: the
// pool grows to the last burst before the next one comes, which then
// finds a member for every start; it never holds more than its maximum,
// grows only while memory allows, and shrinks to its minimum once the
// bursts are older than DemandWindow.
func TestSizeFollowsDemand(t *testing.T) {
	r := newRig(t, 0, nil, func(r *rig) { r.lo.Store(1); r.hi.Store(20) })
	if st := r.settle(); st.Waiting != 1 {
		t.Fatalf("quiet pool: %+v, want its minimum, 1", st)
	}
	burst := func(n int) (hits int) {
		ids := map[string]bool{}
		for range n {
			if m, ok := r.p.Claim(); ok {
				if ids[m.id] {
					t.Fatalf("member %s claimed twice", m.id)
				}
				ids[m.id] = true
				hits++
			}
		}
		return hits
	}
	if hits := burst(12); hits != 1 {
		t.Fatalf("first burst: %d members claimed, want the 1 waiting", hits)
	}
	if st := r.settle(); st.Waiting != 12 {
		t.Fatalf("after a burst of 12: %+v, want 12 waiting", st)
	}
	r.clk.Advance(time.Minute)
	if hits := burst(12); hits != 12 {
		t.Fatalf("second burst a minute later: %d of 12 starts found a member", hits)
	}
	if st := r.settle(); st.Waiting != 12 {
		t.Fatalf("after the second burst: %+v, want 12 waiting", st)
	}
	// A burst past the maximum: the pool stops at it.
	r.clk.Advance(time.Minute)
	burst(50)
	if st := r.settle(); st.Waiting != 20 {
		t.Fatalf("after a burst of 50: %+v, want the maximum, 20", st)
	}
	// Memory low: a burst empties the pool, which does not grow back
	// until memory is available again.
	r.free.Store(warmpool.GrowFreePercent - 1)
	r.clk.Advance(time.Minute)
	burst(20)
	if st := r.settle(); st.Waiting != 0 {
		t.Fatalf("memory low: %+v, want no growth", st)
	}
	r.free.Store(50)
	if st := r.settle(); st.Waiting != 20 {
		t.Fatalf("memory back: %+v, want 20 waiting", st)
	}
	// Idle past the window: back to the minimum, the oldest removed.
	removed := len(r.removedIDs())
	r.clk.Advance(warmpool.DemandWindow + time.Second)
	if st := r.settle(); st.Waiting != 1 {
		t.Fatalf("idle for %v: %+v, want the minimum, 1", warmpool.DemandWindow, st)
	}
	if got := len(r.removedIDs()) - removed; got != 19 {
		t.Errorf("idle pool removed %d members, want 19", got)
	}
	// lo equal to hi is a fixed size, whatever the demand.
	r.lo.Store(4)
	r.hi.Store(4)
	burst(30)
	if st := r.settle(); st.Waiting != 4 {
		t.Fatalf("fixed size 4 after a burst: %+v", st)
	}
}

// TestCreatorsWiden: a pool that needs many members starts Creators
// creates at once and, as they come back fast, runs more at once.
func TestCreatorsWiden(t *testing.T) {
	gate := make(chan struct{})
	r := newRig(t, 20, gate)
	if err := r.p.Sync(r.ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.p.Stats(); st.Creating != warmpool.Creators {
		t.Fatalf("stats %+v, want %d creating", st, warmpool.Creators)
	}
	for range warmpool.Creators {
		gate <- struct{}{}
	}
	testkit.EventuallyContext(t, r.ctx, "more creates at once after fast ones", func() bool {
		r.p.Sync(r.ctx)
		return r.p.Stats().Creating == warmpool.Creators+2
	})
	if w := r.p.Creators(); w != warmpool.Creators+2 {
		t.Fatalf("creates at once: %d, want %d", w, warmpool.Creators+2)
	}
}

// TestSettle: while starts claim members, the pool holds its refills back
// until the claims have been quiet for Settle, and never longer than
// MaxSettle after the spell's first claim.
func TestSettle(t *testing.T) {
	const settle, maxSettle = 250 * time.Millisecond, 2 * time.Second
	r := newRigWith(t, 3, nil, func(c *warmpool.Config[member]) { c.Settle, c.MaxSettle = settle, maxSettle })
	if st := r.settle(); st.Waiting != 3 {
		t.Fatalf("filled: %+v", st)
	}
	made := func() int { r.mu.Lock(); defer r.mu.Unlock(); return r.made }
	before := made()
	for range 3 {
		if _, ok := r.p.Claim(); !ok {
			t.Fatal("claim found no member")
		}
	}
	if st := r.settle(); st.Waiting != 0 || made() != before {
		t.Fatalf("right after a burst of claims: %+v, %d made; want the refills held back", st, made()-before)
	}
	r.clk.Advance(settle - time.Millisecond)
	if st := r.settle(); st.Waiting != 0 || made() != before {
		t.Fatalf("%v after the last claim: %+v, %d made; want the refills still held", settle-time.Millisecond, st, made()-before)
	}
	r.clk.Advance(time.Millisecond)
	if st := r.settle(); st.Waiting != 3 || made() != before+3 {
		t.Fatalf("once the claims were quiet for %v: %+v, %d made; want 3", settle, st, made()-before)
	}

	// Claims that keep coming hold the refills for MaxSettle at most.
	before = made()
	began := r.clk.Now()
	for r.clk.Now().Sub(began) < maxSettle {
		r.p.Claim() // once the pool is empty, a claim that finds none
		r.settle()
		if r.clk.Now().Sub(began) < maxSettle && made() != before {
			t.Fatalf("%v into a spell of claims: %d made, want none yet", r.clk.Now().Sub(began), made()-before)
		}
		r.clk.Advance(100 * time.Millisecond)
	}
	r.p.Wanted()
	if st := r.settle(); made() != before+3 || st.Waiting != 3 {
		t.Fatalf("%v into a spell of claims: %+v, %d made; want the pool refilled", r.clk.Now().Sub(began), st, made()-before)
	}
}
