// Package warmpool keeps members (computers started ahead of time) waiting
// to be claimed: it fills a pool to its target size a few creates at a
// time, backs off after a failed create, retires members that waited their
// longest (providers.PoolMaxWait for computers), shrinks under host memory pressure, counts claims
// and drains what waits at shutdown. Its time comes from an injected
// clock, so tests step the clock instead of sleeping.
//
// The supervisor's pools (one per provider) and the lending agent's pool
// use it; how a member is made, checked and removed is theirs.
package warmpool

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// Policy shared by every warm pool.
const (
	// GrowFreePercent: a pool grows only while at least this share of the
	// host's memory is available.
	GrowFreePercent = 10
	// ShrinkFreePercent: below this share a pool removes its oldest
	// waiting member each pass.
	ShrinkFreePercent = 5
	// Creators is how many creates a new pool has in flight at most; it
	// adapts from there, up to MaxCreators (demand.go).
	Creators = 2
	// Interval is the time between two passes when nothing wakes the pool.
	Interval = time.Second
	// MinBackoff and MaxBackoff bound the wait after a failed create; it
	// doubles with each failure in a row.
	MinBackoff = time.Second
	MaxBackoff = time.Minute
	// ClaimSettle and ClaimMaxSettle are the Settle and MaxSettle of the
	// supervisor's and the lending agent's pools.
	ClaimSettle    = 250 * time.Millisecond
	ClaimMaxSettle = 2 * time.Second
)

// Unlimited is the room of a pool that only its size bounds.
const Unlimited = math.MaxInt

// Verdict is what becomes of a member whose create succeeded.
type Verdict int

const (
	// Keep offers the member: it waits in the pool.
	Keep Verdict = iota
	// Discard removes the member (through Config.Remove).
	Discard
	// Taken leaves the member alone: it was claimed before it waited.
	Taken
)

// Stats is a pool's state.
type Stats struct {
	Waiting  int   // made and unclaimed, ready to be claimed
	Creating int   // being made
	Removing int   // taken out and being removed
	Claimed  int64 // claimed since the pool was made
}

// Config is what a pool's user supplies. Create, Remove, ID and Made are
// required. Hooks documented as called with the lock held must not call
// the pool's methods, except Poke.
type Config[M any] struct {
	Clock  clock.Clock  // nil: the real clock
	Logger *slog.Logger // nil: no logs
	// Locker guards the pool's state; nil gives the pool a mutex of its
	// own. A user whose limits count the pool's members with state of its
	// own passes the lock that guards that state.
	Locker sync.Locker
	// MaxWait is the longest a member waits; an older one is replaced and
	// never claimed (0: members never grow old).
	MaxWait time.Duration
	// Ready reports whether a pass may run now (nil: always); a pass it
	// refuses changes nothing.
	Ready func() bool
	// MemInfo reports the host's available and total memory in bytes; nil,
	// or an error, turns the memory policy off for a pass.
	MemInfo func() (available, total uint64, err error)
	// Target returns how many members the pool should hold and how many
	// more members the user's limits leave room for (Unlimited: no limit
	// beyond the size). Called with the lock held; nil: size 0.
	Target func(now time.Time, st Stats) (size, room int)
	// Create makes one member, ready to be claimed. ctx is the context
	// Run was given; a create that must not be cut short detaches from it.
	Create func(ctx context.Context) (M, error)
	// Accept decides what becomes of a member whose create succeeded.
	// Called with the lock held; nil: Keep.
	Accept func(m M, st Stats) Verdict
	// Remove destroys a member taken out of the pool; why says for what.
	// It reports whether it removed the member (false: someone else owns
	// it now, for example a claim that came first).
	Remove func(ctx context.Context, m M, why string) bool
	// Settle holds the creates back while starts claim members: a pass
	// starts none until Settle passed since the last claim, or MaxSettle
	// since the first claim of the spell, so that a burst's starts do not
	// share the cores with the refills they cause. 0: creates follow
	// claims at once.
	Settle, MaxSettle time.Duration
	// ID names a member; Made is when its making began, which its age
	// counts from.
	ID   func(M) string
	Made func(M) time.Time
}

// Pool is a warm pool of members of type M.
type Pool[M any] struct {
	cfg  Config[M]
	clk  clock.Clock
	log  *slog.Logger
	mu   sync.Locker
	wake chan struct{}
	wg   sync.WaitGroup // creates in flight

	// Guarded by mu.
	waiting  map[string]M
	creating int
	removing int
	claimed  int64
	gen      uint64        // bumped by Drain; creates begun before are discarded
	failWait time.Duration // backoff after a failed create
	retryAt  time.Time
	changed  chan struct{} // closed and replaced when a create or removal ends
	began    uint64        // passes begun
	passed   chan struct{} // closed and replaced when a pass ends
	ended    uint64        // passes ended
	demand   demand        // claims and create times (demand.go)
	// The spell of claims that holds the creates back (Config.Settle).
	lastClaim, spellBegan time.Time
}

// New returns an empty pool; Run fills it.
func New[M any](cfg Config[M]) *Pool[M] {
	p := &Pool[M]{cfg: cfg, clk: cfg.Clock, log: cfg.Logger, mu: cfg.Locker,
		wake: make(chan struct{}, 1), waiting: map[string]M{},
		changed: make(chan struct{}), passed: make(chan struct{})}
	if p.clk == nil {
		p.clk = clock.Real{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.mu == nil {
		p.mu = new(sync.Mutex)
	}
	return p
}

// Poke asks for a pass now. It never blocks and needs no lock, so a user
// may call it with the pool's lock held.
func (p *Pool[M]) Poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run keeps the pool filled until ctx ends, a pass at once, then whenever
// poked or Interval passed; it returns after the creates in flight ended.
func (p *Pool[M]) Run(ctx context.Context) {
	defer p.wg.Wait()
	for {
		wait := p.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-p.clk.After(wait):
		}
	}
}

// Sync pokes the pool and waits until a pass that began after the call
// has ended, or ctx ends; tests use it to see the effect of a pass.
func (p *Pool[M]) Sync(ctx context.Context) error {
	p.mu.Lock()
	want := p.began + 1
	p.mu.Unlock()
	p.Poke()
	for {
		p.mu.Lock()
		done, ch := p.ended >= want, p.passed
		p.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pass retires the members that waited their longest, removes the oldest
// under memory pressure and those beyond the size, and starts the creates
// that the size, the room, the memory, the backoff and a spell of claims
// allow. It returns the time until the next pass is due.
func (p *Pool[M]) pass(ctx context.Context) (wait time.Duration) {
	wait = Interval
	p.mu.Lock()
	p.began++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.ended++
		close(p.passed)
		p.passed = make(chan struct{})
		p.mu.Unlock()
	}()
	if p.cfg.Ready != nil && !p.cfg.Ready() {
		return wait
	}
	grow, shrink := true, false
	if p.cfg.MemInfo != nil {
		if avail, total, err := p.cfg.MemInfo(); err == nil && total > 0 {
			grow = avail*100 >= total*GrowFreePercent
			shrink = avail*100 < total*ShrinkFreePercent
		}
	}
	type drop struct {
		m   M
		why string
	}
	var drops []drop
	take := func(m M, why string) {
		delete(p.waiting, p.cfg.ID(m))
		p.removing++
		drops = append(drops, drop{m, why})
	}
	now := p.clk.Now()
	p.mu.Lock()
	for _, m := range p.waiting {
		if p.old(m, now) {
			take(m, "it waited its longest")
		}
	}
	if shrink {
		if m, ok := p.oldest(); ok {
			p.log.Warn("warm pool: host memory low; removing a waiting computer", "computer", p.cfg.ID(m))
			take(m, "host memory is low")
		}
	}
	size, room := 0, 0
	if p.cfg.Target != nil {
		size, room = p.cfg.Target(now, p.stats())
	}
	for len(p.waiting) > max(size, 0) {
		m, _ := p.oldest()
		take(m, "the pool is over its size")
	}
	need := min(size-len(p.waiting)-p.creating, room, p.demand.creators()-p.creating)
	if shrink || !grow || now.Before(p.retryAt) || ctx.Err() != nil {
		need = 0
	}
	if left := p.settling(now); need > 0 && left > 0 {
		need, wait = 0, min(wait, left)
	}
	gen := p.gen
	for range max(need, 0) {
		p.creating++
		p.wg.Go(func() { p.create(ctx, gen) })
	}
	p.mu.Unlock()
	for _, d := range drops {
		p.log.Info("warm pool: removing a waiting computer", "computer", p.cfg.ID(d.m), "reason", d.why)
		p.remove(ctx, d.m, d.why)
	}
	return wait
}

// noteClaim counts a claim at now toward the pool's demand and its spell
// of claims. Called with the lock held.
func (p *Pool[M]) noteClaim(now time.Time) {
	p.demand.claimed(now)
	if p.cfg.Settle <= 0 {
		return
	}
	if p.lastClaim.IsZero() || now.Sub(p.lastClaim) >= p.cfg.Settle {
		p.spellBegan = now
	}
	p.lastClaim = now
}

// settling returns how long creates are still held back at now by the
// spell of claims (0: not held). Called with the lock held.
func (p *Pool[M]) settling(now time.Time) time.Duration {
	if p.cfg.Settle <= 0 || p.lastClaim.IsZero() {
		return 0
	}
	end := p.lastClaim.Add(p.cfg.Settle)
	if p.cfg.MaxSettle > 0 {
		if limit := p.spellBegan.Add(p.cfg.MaxSettle); limit.Before(end) {
			end = limit
		}
	}
	return max(end.Sub(now), 0)
}

// create makes one member and offers it, unless the pool was drained
// meanwhile or Accept says otherwise.
func (p *Pool[M]) create(ctx context.Context, gen uint64) {
	defer p.Poke()
	began := p.clk.Now()
	m, err := p.cfg.Create(ctx)
	p.mu.Lock()
	p.creating--
	if err != nil {
		if ctx.Err() == nil {
			p.failWait = min(max(2*p.failWait, MinBackoff), MaxBackoff)
			p.retryAt = p.clk.Now().Add(p.failWait)
		}
		p.changedLocked()
		p.mu.Unlock()
		return
	}
	p.failWait = 0
	p.demand.created(p.clk.Now().Sub(began))
	v := Discard
	if gen == p.gen {
		v = Keep
		if p.cfg.Accept != nil {
			v = p.cfg.Accept(m, p.stats())
		}
	}
	switch v {
	case Keep:
		p.waiting[p.cfg.ID(m)] = m
	case Discard:
		p.removing++ // it counts until it is gone
	}
	p.changedLocked()
	p.mu.Unlock()
	switch v {
	case Keep:
		p.log.Debug("warm pool: computer waiting", "computer", p.cfg.ID(m))
	case Discard:
		p.remove(ctx, m, "the pool emptied or its room was taken while it started")
	}
}

// remove removes m, counted in removing until it is gone, and reports
// whether Remove removed it.
func (p *Pool[M]) remove(ctx context.Context, m M, why string) bool {
	defer func() {
		p.mu.Lock()
		p.removing--
		p.changedLocked()
		p.mu.Unlock()
		p.Poke()
	}()
	return p.cfg.Remove(ctx, m, why)
}

// changedLocked tells those waiting for a create or a removal that one
// ended.
func (p *Pool[M]) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// oldest returns the member that waited longest.
func (p *Pool[M]) oldest() (M, bool) {
	var (
		o     M
		found bool
	)
	for _, m := range p.waiting {
		if !found || p.cfg.Made(m).Before(p.cfg.Made(o)) {
			o, found = m, true
		}
	}
	return o, found
}

// old reports whether m waited its longest at now.
func (p *Pool[M]) old(m M, now time.Time) bool {
	return p.cfg.MaxWait > 0 && now.Sub(p.cfg.Made(m)) >= p.cfg.MaxWait
}

func (p *Pool[M]) stats() Stats {
	return Stats{Waiting: len(p.waiting), Creating: p.creating, Removing: p.removing, Claimed: p.claimed}
}

// Stats reports the pool's state.
func (p *Pool[M]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats()
}

// Members returns the members waiting, in no order.
func (p *Pool[M]) Members() []M {
	p.mu.Lock()
	defer p.mu.Unlock()
	ms := make([]M, 0, len(p.waiting))
	for _, m := range p.waiting {
		ms = append(ms, m)
	}
	return ms
}

// Claim takes the member that waited longest out of the pool, and counts
// the claim. It returns false when none waits, or when that one waited its
// longest (the next pass replaces it). Either way the call counts toward
// the pool's demand (Size).
func (p *Pool[M]) Claim() (M, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.Poke()
	p.noteClaim(p.clk.Now())
	m, ok := p.oldest()
	if !ok || p.old(m, p.clk.Now()) {
		var zero M
		return zero, false
	}
	delete(p.waiting, p.cfg.ID(m))
	p.claimed++
	return m, true
}

// Claimed counts the claim of member id, made by the user (a member is
// claimed as soon as it is offered, before it waits here perhaps), and
// takes it out of the pool if it waits.
func (p *Pool[M]) Claimed(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, id)
	p.claimed++
	p.Poke()
}

// Wanted counts a start that could have used a member, whether or not
// one was there, toward the pool's demand (Size), for a user whose claims
// happen elsewhere (the supervisor claims members in its store).
func (p *Pool[M]) Wanted() {
	p.mu.Lock()
	p.noteClaim(p.clk.Now())
	p.mu.Unlock()
	p.Poke()
}

// Discard removes a member that a claim took out of the pool but could not
// use; it counts in Stats.Removing until it is gone.
func (p *Pool[M]) Discard(ctx context.Context, m M, why string) {
	p.mu.Lock()
	p.removing++
	p.mu.Unlock()
	p.remove(ctx, m, why)
}

// MakeRoom removes waiting members, oldest first, for why, while over
// (called with the lock held) reports more than 0, waiting for the creates and removals
// in flight when only they remain. It returns ctx's error if ctx ends
// first.
func (p *Pool[M]) MakeRoom(ctx context.Context, why string, over func(Stats) int) error {
	for {
		p.mu.Lock()
		st := p.stats()
		if over(st) <= 0 || st.Waiting+st.Creating+st.Removing == 0 {
			p.mu.Unlock()
			return nil
		}
		if m, ok := p.oldest(); ok {
			delete(p.waiting, p.cfg.ID(m))
			p.removing++
			p.mu.Unlock()
			p.remove(ctx, m, why)
			continue
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Drain empties the pool: it removes every waiting member, at once, and
// discards the creates in flight when they end. It returns how many
// members Remove removed.
func (p *Pool[M]) Drain(ctx context.Context, why string) int {
	p.mu.Lock()
	p.gen++
	ms := make([]M, 0, len(p.waiting))
	for _, m := range p.waiting {
		ms = append(ms, m)
	}
	clear(p.waiting)
	p.removing += len(ms)
	p.mu.Unlock()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for _, m := range ms {
		wg.Go(func() {
			if p.remove(ctx, m, why) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return n
}
