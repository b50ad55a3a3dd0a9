package lender

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// The warm pool on a lent machine (the owner's WarmPoolSize). A cold start
// costs most of a second, nearly all of it the runtime starting the
// container; the pool keeps that many headless computers started ahead of
// time through the docker provider's CreatePooled: fully hardened, each in
// its own network with its own volume, and unbound, knowing only the
// SHA-256 of a one-time bind secret that lives in this agent's memory. A
// start that passes every owner limit (and the owner's approval) claims
// one, is recorded in the ledger like any other, and binds it to the
// session's token hash and environment in one call; a used computer is
// destroyed with its session and never waits again.
//
// Waiting computers count toward MaxComputers: the pool grows only into
// room no session uses, and a cold start (a desktop, or an empty pool)
// first removes the waiting computers that would take it over the limit.
// Any change of the owner's settings, turning lending off, leaving the
// allowed hours and the agent's shutdown empty the pool (it refills with
// the new limits); so does a restart, whose agent removes what its earlier
// run left waiting, since the bind secrets died with it. Under host memory
// pressure it shrinks by one computer a pass.

// Pooler is the docker provider's warm-pool ability (providers/docker/pool.go).
type Pooler interface {
	// CreatePooled starts a headless computer that waits for the holder of
	// the bind secret whose hex SHA-256 is bindHash.
	CreatePooled(ctx context.Context, spec providers.Spec, bindHash string) (providers.Machine, error)
	// MemInfo reports the host's available and total memory in bytes.
	MemInfo() (available, total uint64, err error)
}

// Warm-pool policy, as the supervisor's.
const (
	// PoolGrowFreePercent: the pool grows only while at least this share
	// of the host's memory is available.
	PoolGrowFreePercent = 10
	// PoolShrinkFreePercent: below this share the pool removes a waiting
	// computer each pass.
	PoolShrinkFreePercent = 5

	poolCreators     = 2 // creates in flight
	poolInterval     = time.Second
	poolReadyTimeout = time.Minute
	poolBindTimeout  = 10 * time.Second
)

// pool is the lender's warm pool; l.mu guards it.
type pool struct {
	waiting  map[string]*pooled // computer id → member
	creating int
	removing int // taken out and being destroyed; their containers still count
	claimed  int64
	gen      uint64        // bumped when the pool empties; older creates are discarded
	wake     chan struct{} // pokes the refill loop
	changed  chan struct{} // closed and replaced when a create ends
	failWait time.Duration // backoff after a failed create
	retryAt  time.Time
	running  bool // the refill loop runs
}

// pooled is a computer waiting in the pool.
type pooled struct {
	id       string // its own computer id (p...), never a session's
	machine  string
	endpoint string
	secret   string // the bind secret; memory only
	created  time.Time
}

func (p *pool) init() {
	if p.waiting == nil {
		p.waiting = map[string]*pooled{}
		p.wake = make(chan struct{}, 1)
		p.changed = make(chan struct{})
	}
}

// poke wakes the refill loop. It runs with l.mu held.
func (p *pool) poke() {
	p.init()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// ended tells those waiting for a create or a removal that one ended. It
// runs with l.mu held.
func (p *pool) ended() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// oldest returns the member that waited longest.
func (p *pool) oldest() *pooled {
	var o *pooled
	for _, m := range p.waiting {
		if o == nil || m.created.Before(o.created) {
			o = m
		}
	}
	return o
}

// PoolStatus reports the warm pool.
func (l *Lender) PoolStatus() control.PoolStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pool.init()
	return control.PoolStatus{Size: l.settings.WarmPoolSize, Waiting: len(l.pool.waiting),
		Creating: l.pool.creating, Claimed: l.pool.claimed}
}

// launch starts the computer for r: from the pool when it holds one
// (headless only), or cold.
func (l *Lender) launch(ctx context.Context, r lending.CreateRequest, day string, now time.Time, lease time.Duration) (*computer, error) {
	if r.Image == providers.ImageHeadless {
		if m := l.claim(); m != nil {
			c, err := l.bind(ctx, m, r, day, now, lease)
			if err == nil {
				return c, nil
			}
			l.log.Warn("bind of a pooled computer failed; starting cold", "computer", r.ComputerID, "pooled", m.id, "err", err)
		}
	}
	if err := l.makeRoom(ctx); err != nil {
		return nil, err
	}
	return l.start(ctx, r, day, l.clk.Now(), lease)
}

// claim takes the oldest waiting computer out of the pool.
func (l *Lender) claim() *pooled {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pool.init()
	m := l.pool.oldest()
	if m != nil && time.Since(m.created) >= providers.PoolMaxWait {
		l.pool.poke() // fillPool replaces it
		return nil
	}
	if m != nil {
		delete(l.pool.waiting, m.id)
		l.pool.claimed++
		l.pool.poke()
	}
	return m
}

// bind records the session and binds the claimed computer m to it. On
// failure m is removed and the session forgotten.
func (l *Lender) bind(ctx context.Context, m *pooled, r lending.CreateRequest, day string, now time.Time, lease time.Duration) (*computer, error) {
	ls := ledger.Session{
		ComputerID: r.ComputerID, SessionID: r.SessionID, AttemptID: r.AttemptID, Agent: r.Agent,
		Workspace: r.Workspace, Image: r.Image, Deployment: r.Deployment, TokenHash: r.TokenHash,
		MachineID: m.machine, Day: day, StartedAt: now, ExpiresAt: now.Add(lease),
	}
	if err := l.cfg.Ledger.Begin(ctx, ls); err != nil {
		l.mu.Lock()
		l.pool.removing++
		l.mu.Unlock()
		l.removePooled(m, "its session could not be recorded")
		return nil, err
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolBindTimeout)
	defer cancel()
	cl := computerd.NewClient(m.endpoint, m.secret, computerd.WithTransport(l.transport))
	_, err := cl.Bind(bctx, computerd.BindRequest{TokenHash: r.TokenHash, Env: l.computerEnv(r.ComputerID, r.Env, l.Settings().Egress)})
	if err != nil {
		if ferr := l.cfg.Ledger.Forget(context.WithoutCancel(ctx), r.ComputerID); ferr != nil {
			l.log.Warn("forget failed start", "computer", r.ComputerID, "err", ferr)
		}
		l.mu.Lock()
		l.pool.removing++
		l.mu.Unlock()
		l.removePooled(m, "its bind failed")
		return nil, err
	}
	l.log.Info("computer started from the warm pool", "computer", r.ComputerID, "machine", m.machine, "agent", r.Agent,
		"workspace", r.Workspace, "expires", ls.ExpiresAt)
	return &computer{s: ls, endpoint: m.endpoint, stop: make(chan struct{})}, nil
}

// makeRoom removes waiting computers until the running, ending, starting,
// waiting, creating and removing computers fit the owner's MaxComputers, waiting for
// creates and removals in flight where only they are over it.
func (l *Lender) makeRoom(ctx context.Context) error {
	for {
		l.mu.Lock()
		l.pool.init()
		p := &l.pool
		over := len(l.running) + len(l.ending) + len(l.starting) + len(p.waiting) + p.creating + p.removing - l.settings.MaxComputers
		if over <= 0 || (len(p.waiting) == 0 && p.creating == 0 && p.removing == 0) {
			l.mu.Unlock()
			return nil
		}
		if m := p.oldest(); m != nil {
			delete(p.waiting, m.id)
			p.removing++
			l.mu.Unlock()
			l.removePooled(m, "a cold start needs its place under the owner's limit")
			continue
		}
		changed := l.pool.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "the request ended while the warm pool made room")
		case <-l.done:
			return ErrClosed
		}
	}
}

// removePooled destroys a computer taken out of the pool, counted in
// removing until it is gone.
func (l *Lender) removePooled(m *pooled, why string) {
	l.mu.Lock()
	d := l.docker
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.pool.removing--
		l.pool.ended()
		l.mu.Unlock()
	}()
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.Destroy(ctx, m.machine); err != nil && !errors.Is(err, providers.ErrNotFound) {
		l.log.Warn("warm pool: remove a waiting computer", "pooled", m.id, "err", err)
		return
	}
	l.log.Info("warm pool: waiting computer removed", "pooled", m.id, "reason", why)
}

// drainPool empties the pool: no waiting computer is claimed afterwards,
// and creates in flight are discarded when they end.
func (l *Lender) drainPool(why string) int {
	l.mu.Lock()
	l.pool.init()
	l.pool.gen++
	ms := make([]*pooled, 0, len(l.pool.waiting))
	for _, m := range l.pool.waiting {
		ms = append(ms, m)
	}
	clear(l.pool.waiting)
	l.pool.removing += len(ms)
	l.mu.Unlock()
	for _, m := range ms {
		l.removePooled(m, why)
	}
	return len(ms)
}

// runPool keeps the pool filled until the lender closes.
func (l *Lender) runPool() {
	l.mu.Lock()
	l.pool.init()
	wake := l.pool.wake
	l.mu.Unlock()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-wake:
		case <-t.C:
		}
		l.fillPool()
		t.Reset(poolInterval)
	}
}

// fillPool starts creates until the pool holds its size, within the
// owner's limits and while the host has memory to spare; it removes
// waiting computers beyond the size, and one a pass under memory pressure.
func (l *Lender) fillPool() {
	d, err := l.provider()
	if err != nil {
		return
	}
	pl, ok := d.(Pooler)
	if !ok {
		return
	}
	grow, shrink := true, false
	if avail, total, err := pl.MemInfo(); err == nil && total > 0 {
		grow = avail*100 >= total*PoolGrowFreePercent
		shrink = avail*100 < total*PoolShrinkFreePercent
	}
	now := l.clk.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.pool.init()
	s := l.settings
	want := s.WarmPoolSize
	if !s.Lending || !allowedAt(s.Hours, localTime(s.TimeZone, now)) {
		want = 0
	}
	var drop []*pooled
	for _, m := range l.pool.waiting {
		// Its machine's expiry label leaves room for one lease after
		// PoolMaxWait: replace it before then.
		if time.Since(m.created) >= providers.PoolMaxWait {
			delete(l.pool.waiting, m.id)
			l.pool.removing++
			drop = append(drop, m)
		}
	}
	if shrink {
		if m := l.pool.oldest(); m != nil {
			delete(l.pool.waiting, m.id)
			l.pool.removing++
			drop = append(drop, m)
			l.log.Warn("warm pool: host memory low; removing a waiting computer", "pooled", m.id)
		}
	}
	for len(l.pool.waiting) > want {
		m := l.pool.oldest()
		delete(l.pool.waiting, m.id)
		l.pool.removing++
		drop = append(drop, m)
	}
	room := s.MaxComputers - len(l.running) - len(l.ending) - len(l.starting) - len(l.pool.waiting) - l.pool.creating - l.pool.removing
	need := min(want-len(l.pool.waiting)-l.pool.creating, room, poolCreators-l.pool.creating)
	if shrink || !grow || time.Now().Before(l.pool.retryAt) {
		need = 0
	}
	gen := l.pool.gen
	for range max(need, 0) {
		l.pool.creating++
		l.wg.Go(func() { l.createPooled(d, pl, gen) })
	}
	l.mu.Unlock()
	for _, m := range drop {
		l.removePooled(m, "the pool is over its size, or the computer waited its longest")
	}
}

func localTime(tz string, t time.Time) time.Time {
	loc, err := location(tz)
	if err != nil {
		loc = time.Local
	}
	return t.In(loc)
}

// createPooled makes one waiting computer and offers it, unless the pool
// emptied or the lender closed meanwhile, or the owner's limit has no room
// for it any more; it is then removed. A create is never cut short: Close
// waits for it.
func (l *Lender) createPooled(d Docker, pl Pooler, gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := l.makePooled(ctx, d, pl)
	l.mu.Lock()
	l.pool.creating--
	if err != nil {
		l.pool.ended()
		l.pool.failWait = min(max(2*l.pool.failWait, time.Second), time.Minute)
		l.pool.retryAt = time.Now().Add(l.pool.failWait)
		l.mu.Unlock()
		l.log.Warn("warm pool: create a computer", "err", err)
		return
	}
	l.pool.failWait = 0
	over := len(l.running)+len(l.ending)+len(l.starting)+len(l.pool.waiting)+l.pool.creating+l.pool.removing >= l.settings.MaxComputers
	if l.closed || gen != l.pool.gen || over || len(l.pool.waiting) >= l.settings.WarmPoolSize {
		l.pool.removing++ // its container counts until it is gone
		l.mu.Unlock()
		l.removePooled(m, "the pool emptied or its room was taken while it started")
		return
	}
	l.pool.ended()
	l.pool.waiting[m.id] = m
	l.pool.poke()
	l.mu.Unlock()
	l.log.Debug("warm pool: computer waiting", "pooled", m.id, "machine", m.machine)
}

// makePooled starts a pooled computer and waits for its computerd.
func (l *Lender) makePooled(ctx context.Context, d Docker, pl Pooler) (*pooled, error) {
	secret, err := token.NewSecret(32)
	if err != nil {
		return nil, err
	}
	var b [8]byte
	rand.Read(b[:])
	id := "p" + hex.EncodeToString(b[:])
	mach, err := pl.CreatePooled(ctx, providers.Spec{ComputerID: id, Deployment: l.deployment, Image: providers.ImageHeadless}, token.Hash(secret))
	if err != nil {
		return nil, err
	}
	m := &pooled{id: id, machine: mach.ID, endpoint: mach.Endpoint, secret: secret, created: time.Now()}
	if m.machine == "" {
		m.machine = docker.ContainerPrefix + id
	}
	if err := l.waitHealthy(ctx, mach.Endpoint); err != nil {
		if derr := d.Destroy(context.WithoutCancel(ctx), m.machine); derr != nil {
			l.log.Warn("warm pool: remove a computer that did not come up", "pooled", id, "err", derr)
		}
		return nil, err
	}
	return m, nil
}

// waitHealthy waits for a computer's computerd to answer its health check;
// it gives up with ErrClosed when the lender closes.
func (l *Lender) waitHealthy(ctx context.Context, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, poolReadyTimeout)
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := computerd.NewClient(endpoint, "", computerd.WithTransport(l.transport)).WaitHealthy(ctx)
	select {
	case <-l.done:
		if err != nil {
			return ErrClosed
		}
	default:
	}
	return err
}

var _ Pooler = (*docker.Docker)(nil)
