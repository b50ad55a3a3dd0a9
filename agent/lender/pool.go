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
	"github.com/berthdev/berth/internal/warmpool"
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

// Warm-pool timing; the rest of the policy is the warmpool package's, as
// the supervisor's.
const (
	poolReadyTimeout = time.Minute
	poolBindTimeout  = 10 * time.Second
)

// pool is the lender's warm pool. Its state is guarded by l.mu, since the
// owner's MaxComputers counts its members with the lender's computers.
type pool struct {
	*warmpool.Pool[*pooled]
	running bool // the refill loop runs
}

// pooled is a computer waiting in the pool.
type pooled struct {
	id       string // its own computer id (p...), never a session's
	machine  string
	endpoint string
	secret   string // the bind secret; memory only
	created  time.Time
}

// newPool is the lender's warm pool: it holds the owner's WarmPoolSize,
// or up to WarmPoolMax as the starts seen ask (warmpool.Pool.Size), while
// lending is on and within the allowed hours, in the room that the
// running, ending and starting computers leave under MaxComputers.
func (l *core) newPool() *warmpool.Pool[*pooled] {
	pooler := func() (Docker, Pooler, error) {
		d, err := l.provider()
		if err != nil {
			return nil, nil, err
		}
		pl, ok := d.(Pooler)
		if !ok {
			return nil, nil, errors.New("the docker provider keeps no warm pool")
		}
		return d, pl, nil
	}
	var wp *warmpool.Pool[*pooled]
	wp = warmpool.New(warmpool.Config[*pooled]{
		Clock: l.clk, Logger: l.log, Locker: &l.mu, MaxWait: providers.PoolMaxWait,
		Settle: warmpool.ClaimSettle, MaxSettle: warmpool.ClaimMaxSettle,
		Ready: func() bool {
			_, _, err := pooler()
			return err == nil
		},
		MemInfo: func() (uint64, uint64, error) {
			_, pl, err := pooler()
			if err != nil {
				return 0, 0, err
			}
			return pl.MemInfo()
		},
		Target: func(now time.Time, st warmpool.Stats) (int, int) {
			s := l.settings
			want := l.poolSize(wp, now)
			if !s.Lending || !allowedAt(s.Hours, localTime(s.TimeZone, now)) {
				want = 0
			}
			return want, s.MaxComputers - l.inUse() - st.Waiting - st.Creating - st.Removing
		},
		Create: func(context.Context) (*pooled, error) {
			d, pl, err := pooler()
			if err == nil {
				var m *pooled
				if m, err = l.makePooled(d, pl); err == nil {
					return m, nil
				}
			}
			l.log.Warn("warm pool: create a computer", "err", err)
			return nil, err
		},
		// Unless the lender closed meanwhile, or the owner's limit has no
		// room for it any more.
		Accept: func(_ *pooled, st warmpool.Stats) warmpool.Verdict {
			over := l.inUse()+st.Waiting+st.Creating+st.Removing >= l.settings.MaxComputers
			if l.closed || over || st.Waiting >= l.poolSize(wp, l.clk.Now()) {
				return warmpool.Discard
			}
			return warmpool.Keep
		},
		Remove: func(_ context.Context, m *pooled, why string) bool {
			l.removePooled(m, why)
			return true
		},
		ID:   func(m *pooled) string { return m.id },
		Made: func(m *pooled) time.Time { return m.created },
	})
	return wp
}

// poolSize is the pool's size now: WarmPoolSize, or more up to
// WarmPoolMax as demand asks. It runs with l.mu held.
func (l *core) poolSize(p *warmpool.Pool[*pooled], now time.Time) int {
	s := l.settings
	return p.Size(now, s.WarmPoolSize, max(s.WarmPoolMax, s.WarmPoolSize))
}

// inUse counts the running, ending and starting computers. It runs with
// l.mu held.
func (l *core) inUse() int { return len(l.running) + len(l.ending) + len(l.starting) }

// PoolStatus reports the warm pool.
func (l *core) PoolStatus() control.PoolStatus {
	st := l.pool.Stats()
	l.mu.Lock()
	size := l.poolSize(l.pool.Pool, l.clk.Now())
	l.mu.Unlock()
	return control.PoolStatus{Size: size, Waiting: st.Waiting, Creating: st.Creating, Claimed: st.Claimed}
}

// launch starts the computer for r: from the pool when it holds one
// (headless only), or cold.
func (l *core) launch(ctx context.Context, r lending.CreateRequest, day string, now time.Time, lease time.Duration) (*computer, error) {
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
func (l *core) claim() *pooled {
	if m, ok := l.pool.Claim(); ok {
		return m
	}
	return nil
}

// bind records the session and binds the claimed computer m to it. On
// failure m is removed and the session forgotten.
func (l *core) bind(ctx context.Context, m *pooled, r lending.CreateRequest, day string, now time.Time, lease time.Duration) (*computer, error) {
	ls := ledger.Session{
		ComputerID: r.ComputerID, SessionID: r.SessionID, AttemptID: r.AttemptID, Agent: r.Agent,
		Workspace: r.Workspace, Image: r.Image, Deployment: r.Deployment, TokenHash: r.TokenHash,
		MachineID: m.machine, Day: day, StartedAt: now, ExpiresAt: now.Add(lease),
	}
	if err := l.cfg.Ledger.Begin(ctx, ls); err != nil {
		l.pool.Discard(ctx, m, "its session could not be recorded")
		return nil, err
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolBindTimeout)
	defer cancel()
	cl := computerd.NewClient(m.endpoint, m.secret, computerd.WithTransport(l.transport))
	_, err := cl.Bind(bctx, computerd.BindRequest{TokenHash: r.TokenHash, Env: l.egress.env(r.ComputerID, r.Env, l.current().Egress)})
	if err != nil {
		if ferr := l.cfg.Ledger.Forget(context.WithoutCancel(ctx), r.ComputerID); ferr != nil {
			l.log.Warn("forget failed start", "computer", r.ComputerID, "err", ferr)
		}
		l.pool.Discard(ctx, m, "its bind failed")
		return nil, err
	}
	l.log.Info("computer started from the warm pool", "computer", r.ComputerID, "machine", m.machine, "agent", r.Agent,
		"workspace", r.Workspace, "expires", ls.ExpiresAt)
	return &computer{s: ls, endpoint: m.endpoint, stop: make(chan struct{})}, nil
}

// makeRoom removes waiting computers until the running, ending, starting,
// waiting, creating and removing computers fit the owner's MaxComputers, waiting for
// creates and removals in flight where only they are over it.
func (l *core) makeRoom(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := l.pool.MakeRoom(ctx, "a cold start needs its place under the owner's limit", func(st warmpool.Stats) int {
		return l.inUse() + st.Waiting + st.Creating + st.Removing - l.settings.MaxComputers
	})
	if err == nil {
		return nil
	}
	select {
	case <-l.done:
		return ErrClosed
	default:
		return errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "the request ended while the warm pool made room")
	}
}

// removePooled destroys a computer taken out of the pool; the pool counts
// it in Removing until it is gone.
func (l *core) removePooled(m *pooled, why string) {
	l.mu.Lock()
	d := l.docker
	l.mu.Unlock()
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
func (l *core) drainPool(why string) int {
	return l.pool.Drain(context.Background(), why)
}

// runPool keeps the pool filled until the lender closes.
func (l *core) runPool() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	l.pool.Run(ctx)
}

func localTime(tz string, t time.Time) time.Time {
	loc, err := location(tz)
	if err != nil {
		loc = time.Local
	}
	return t.In(loc)
}

// makePooled starts a pooled computer and waits for its computerd. A
// create is never cut short: Close waits for it.
func (l *core) makePooled(d Docker, pl Pooler) (*pooled, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
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
	m := &pooled{id: id, machine: mach.ID, endpoint: mach.Endpoint, secret: secret, created: l.clk.Now()}
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
func (l *core) waitHealthy(ctx context.Context, endpoint string) error {
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
