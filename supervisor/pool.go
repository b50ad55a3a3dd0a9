package supervisor

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/internal/warmpool"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// Pooler is a provider that can keep computers started ahead of time: the
// warm pools (the docker provider: headless computers, WARM_POOL_SIZE to
// WARM_POOL_MAX, and desktop ones, WARM_POOL_DESKTOP). Each waits unbound
// until a start claims it and binds it to its session.
type Pooler interface {
	// PoolRange is how many computers of image to keep waiting: at least
	// lo, and up to hi as the starts seen ask (warmpool.Pool.Size); hi 0
	// turns that pool off.
	PoolRange(image string) (lo, hi int)
	// CreatePooled starts a computer of spec.Image that waits for the
	// holder of the bind secret whose hex SHA-256 is bindHash. spec.Env
	// holds only the supervisor-wide settings a desktop's screen reads
	// when it starts (the TURN relay); never a secret.
	CreatePooled(ctx context.Context, spec providers.Spec, bindHash string) (providers.Machine, error)
	// MemInfo reports the host's available and total memory in bytes.
	MemInfo() (available, total uint64, err error)
}

// Warm-pool timing; the rest of the policy is the warmpool package's.
const (
	poolCollectEvery = 15 * time.Second
	poolReadyTimeout = time.Minute
	poolBindTimeout  = 10 * time.Second
)

// PoolStats is the state of this supervisor's warm pools.
type PoolStats struct {
	Waiting  int   // started and unbound, ready to be claimed
	Creating int   // being made
	Claimed  int64 // claimed by starts since this supervisor started
}

// PoolOptions are what a Pool needs.
type PoolOptions struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Providers are the configured providers by id; those that are Poolers
	// get a warm pool.
	Providers map[string]providers.Provider
	// HTTPClient reaches the pool computers' daemons.
	HTTPClient *http.Client
	// Instance is this supervisor's instance id, the owner of the
	// computers its pools make.
	Instance string
	// Deployment returns the deployment id each pool computer is labelled
	// with.
	Deployment func(context.Context) (string, error)
	// Machines lists a provider's machines of this deployment.
	Machines func(ctx context.Context, provider string) ([]providers.Machine, error)
	// DesktopEnv is the environment pooled desktop computers start with:
	// the supervisor-wide settings their screen reads at start (the TURN
	// relay, the encoder's idle stop). A bind adds the rest.
	DesktopEnv map[string]string
}

// Pool is this supervisor's part of the warm pools: one pool per provider
// that keeps one, and the bind secrets of the computers it made (only ever
// in this process's memory). The store records the members themselves.
type Pool struct {
	st         store.Store
	clk        clock.Clock
	log        *slog.Logger
	providers  map[string]providers.Provider
	http       *http.Client
	instance   string
	deployment func(context.Context) (string, error)
	machines   func(ctx context.Context, provider string) ([]providers.Machine, error)
	desktopEnv map[string]string

	once    sync.Once
	mu      sync.Mutex        // guards secrets and the pools' state
	secrets map[string]string // computer id -> bind secret
	pools   map[string]*warmpool.Pool[store.PoolMember]
}

// NewPool returns the warm pools of opts; each is made on first use.
func NewPool(opts PoolOptions) *Pool {
	return &Pool{
		st: opts.Store, clk: opts.Clock, log: opts.Logger, providers: opts.Providers, http: opts.HTTPClient,
		instance: opts.Instance, deployment: opts.Deployment, machines: opts.Machines, desktopEnv: opts.DesktopEnv,
	}
}

// poolImages are the images a provider's warm pools may hold, one pool
// each.
var poolImages = []string{providers.ImageHeadless, providers.ImageDesktop}

// poolKey names the warm pool of provider's computers of image.
func poolKey(provider, image string) string {
	if image == "" {
		image = providers.ImageHeadless
	}
	return provider + "/" + image
}

// warmPools returns the warm pools by poolKey, made on first use.
func (w *Pool) warmPools() map[string]*warmpool.Pool[store.PoolMember] {
	w.once.Do(func() {
		pools := map[string]*warmpool.Pool[store.PoolMember]{}
		for id, p := range w.providers {
			if pl, ok := p.(Pooler); ok {
				for _, image := range poolImages {
					pools[poolKey(id, image)] = w.newWarmPool(id, image, pl)
				}
			}
		}
		w.mu.Lock()
		w.secrets, w.pools = map[string]string{}, pools
		w.mu.Unlock()
	})
	return w.pools
}

// newWarmPool is the warm pool of provider id's computers of image: its
// members wait in the store until a start claims one there.
func (w *Pool) newWarmPool(id, image string, pl Pooler) *warmpool.Pool[store.PoolMember] {
	var wp *warmpool.Pool[store.PoolMember]
	wp = warmpool.New(warmpool.Config[store.PoolMember]{
		Clock: w.clk, Logger: w.log.With("provider", id, "image", image), Locker: &w.mu, MaxWait: providers.PoolMaxWait,
		Settle: warmpool.ClaimSettle, MaxSettle: warmpool.ClaimMaxSettle,
		Ready:   func() bool { _, hi := pl.PoolRange(image); return hi > 0 },
		MemInfo: pl.MemInfo,
		Target: func(now time.Time, _ warmpool.Stats) (int, int) {
			lo, hi := pl.PoolRange(image)
			return wp.Size(now, lo, hi), warmpool.Unlimited
		},
		Create: func(ctx context.Context) (store.PoolMember, error) { return w.create(ctx, id, image, pl) },
		Accept: func(m store.PoolMember, _ warmpool.Stats) warmpool.Verdict {
			if _, ok := w.secrets[m.ComputerID]; !ok {
				return warmpool.Taken // claimed as soon as the store offered it
			}
			return warmpool.Keep
		},
		Remove: func(ctx context.Context, m store.PoolMember, _ string) bool { return w.removeWaiting(ctx, id, m) },
		ID:     func(m store.PoolMember) string { return m.ComputerID },
		Made:   func(m store.PoolMember) time.Time { return m.CreatedAt },
	})
	return wp
}

// poke asks every warm pool for a pass.
func (w *Pool) poke() {
	w.mu.Lock()
	pools := w.pools
	w.mu.Unlock()
	for _, p := range pools {
		p.Poke()
	}
}

// take removes a claimed member's secret from the pool and returns it.
func (w *Pool) take(provider, image, computerID string) (string, bool) {
	pools := w.warmPools()
	w.mu.Lock()
	secret, ok := w.secrets[computerID]
	delete(w.secrets, computerID)
	w.mu.Unlock()
	if p := pools[poolKey(provider, image)]; ok && p != nil {
		p.Claimed(computerID)
	}
	return secret, ok
}

// Stats reports this supervisor's warm pools.
func (w *Pool) Stats() PoolStats {
	var st PoolStats
	for _, p := range w.warmPools() {
		ps := p.Stats()
		st.Waiting += ps.Waiting
		st.Creating += ps.Creating
		st.Claimed += ps.Claimed
	}
	return st
}

// owner is the PoolOwner of a reservation for connection c: this
// instance when c's provider keeps a warm pool of c's image.
func (w *Pool) owner(c store.Connection) string {
	pl, ok := w.providers[c.Provider].(Pooler)
	if !ok || (c.Image != "" && c.Image != providers.ImageHeadless && c.Image != providers.ImageDesktop) {
		return ""
	}
	image := cmp.Or(c.Image, providers.ImageHeadless)
	if _, hi := pl.PoolRange(image); hi <= 0 {
		return ""
	}
	return w.instance
}

// poolOff reports whether pl keeps no warm pool of any image.
func poolOff(pl Pooler) bool {
	for _, image := range poolImages {
		if _, hi := pl.PoolRange(image); hi > 0 {
			return false
		}
	}
	return true
}

// wanted counts a start that the warm pool of provider's computers of
// image could have served toward that pool's demand.
func (w *Pool) wanted(provider, image string) {
	if p := w.warmPools()[poolKey(provider, image)]; p != nil {
		p.Wanted()
	}
}

// forget removes the pool record of a destroyed computer, if it was one.
func (w *Pool) forget(ctx context.Context, x store.Session) {
	if _, ok := w.providers[x.Provider].(Pooler); !ok {
		return
	}
	if err := w.st.DeletePoolMember(ctx, x.ComputerID, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
		w.log.Warn("forget pool member", "computer", x.ComputerID, "err", err)
	}
}

// Run keeps the warm pools filled and collects what pools of dead
// supervisors left until ctx ends, then waits for the creates in flight.
// Drain removes what is left waiting.
func (w *Pool) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range w.warmPools() {
		wg.Go(func() { p.Run(ctx) })
	}
	wg.Go(func() {
		for {
			w.collect(ctx)
			select {
			case <-ctx.Done():
				return
			case <-w.clk.After(poolCollectEvery):
			}
		}
	})
	wg.Wait()
}

// create makes one pool computer: recorded first (so that nothing of
// it is ever unaccounted for), created, waited for, then offered; its pool
// keeps it unless a start claimed it at once. A create
// is never cut short (the engine may finish what it was asked after the
// caller gave up): at shutdown Run waits for it, and Drain removes
// the computer.
func (w *Pool) create(ctx context.Context, provider, image string, pl Pooler) (store.PoolMember, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	dep, err := w.deployment(ctx)
	if err != nil {
		return store.PoolMember{}, err
	}
	secret, err := token.NewSecret(32)
	if err != nil {
		return store.PoolMember{}, err
	}
	m := store.PoolMember{
		ComputerID: newID("p"), Provider: provider, Image: image, AttemptID: newID("a_"),
		Owner: w.instance, State: store.PoolCreating, CreatedAt: w.clk.Now().UTC(),
	}
	log := w.log.With("provider", provider, "image", image, "computer", m.ComputerID)
	if err := w.st.AddPoolMember(ctx, m); err != nil {
		log.Warn("warm pool: record a new computer", "err", err)
		return store.PoolMember{}, err
	}
	forget := func(machineID string) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if machineID != "" {
			if err := w.providers[provider].Destroy(cctx, machineID); err != nil && !errors.Is(err, providers.ErrNotFound) {
				log.Warn("warm pool: remove a computer that did not come up", "err", err)
				return // the record stays, so the collector retries
			}
		}
		w.st.DeletePoolMember(cctx, m.ComputerID, "")
	}
	spec := providers.Spec{ComputerID: m.ComputerID, AttemptID: m.AttemptID, Deployment: dep, Image: image}
	if image == providers.ImageDesktop {
		spec.Env = maps.Clone(w.desktopEnv)
	}
	mach, err := pl.CreatePooled(ctx, spec, token.Hash(secret))
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("warm pool: create a computer", "err", err)
		}
		forget("")
		return store.PoolMember{}, err
	}
	if err := w.waitReady(ctx, mach.Endpoint, image); err != nil {
		if ctx.Err() == nil {
			log.Warn("warm pool: computer did not become ready", "machine", mach.ID, "err", err)
		}
		forget(mach.ID)
		return store.PoolMember{}, err
	}
	m.MachineID, m.Endpoint, m.State = mach.ID, mach.Endpoint, store.PoolWaiting
	// The secret is in place before the store offers the computer.
	w.mu.Lock()
	w.secrets[m.ComputerID] = secret
	w.mu.Unlock()
	if err := w.st.UpdatePoolMember(context.WithoutCancel(ctx), m, store.PoolCreating); err != nil {
		log.Warn("warm pool: offer a computer", "err", err)
		w.mu.Lock()
		delete(w.secrets, m.ComputerID)
		w.mu.Unlock()
		forget(mach.ID)
		return store.PoolMember{}, err
	}
	return m, nil
}

// waitReady waits for a pool computer's daemon to answer its health check
// and, on a desktop, for its screen to have answered a first screenshot:
// a desktop is offered with its screen up, so that a session's first
// screenshot does not wait for the X server to start.
func (w *Pool) waitReady(ctx context.Context, endpoint, image string) error {
	ctx, cancel := context.WithTimeout(ctx, poolReadyTimeout)
	defer cancel()
	c := computerd.NewClient(endpoint, "", computerd.WithHTTPClient(w.http))
	if err := c.WaitHealthy(ctx); err != nil {
		return err
	}
	if image == providers.ImageDesktop {
		return c.WaitScreen(ctx)
	}
	return nil
}

// removeWaiting takes a waiting member out of the store (so no start can
// claim it) and destroys it.
func (w *Pool) removeWaiting(ctx context.Context, provider string, m store.PoolMember) bool {
	if err := w.st.DeletePoolMember(ctx, m.ComputerID, store.PoolWaiting); err != nil {
		return false // claimed meanwhile, or gone
	}
	w.mu.Lock()
	delete(w.secrets, m.ComputerID)
	w.mu.Unlock()
	p, ok := w.providers[provider]
	if !ok || m.MachineID == "" {
		return true
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := p.Destroy(dctx, m.MachineID); err != nil && !errors.Is(err, providers.ErrNotFound) {
		w.log.Warn("warm pool: remove a waiting computer", "machine", m.MachineID, "err", err)
	}
	return true
}

// Drain removes the computers waiting in this supervisor's pools; a
// supervisor calls it when it shuts down, after Run has returned.
func (w *Pool) Drain(ctx context.Context) int {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for _, p := range w.warmPools() {
		wg.Go(func() {
			k := p.Drain(ctx, "the supervisor is shutting down")
			mu.Lock()
			n += k
			mu.Unlock()
		})
	}
	wg.Wait()
	if n > 0 {
		w.log.Info("warm pool: removed the waiting computers", "n", n)
	}
	return n
}

// collect removes what pools of dead supervisors left: members still
// creating or waiting whose owner no longer beats (nobody holds their bind
// secret), and pool machines of this deployment that no record accounts
// for. Claimed members belong to their sessions.
func (w *Pool) collect(ctx context.Context) {
	members, err := w.st.PoolMembers(ctx)
	if err != nil {
		return
	}
	now := w.clk.Now()
	known := map[string]store.PoolMember{}
	alive := map[string]bool{w.instance: true}
	for _, m := range members {
		known[m.ComputerID] = m
		if m.State == store.PoolClaimed {
			continue
		}
		ok, seen := alive[m.Owner]
		if !seen {
			ok, err = w.st.InstanceAlive(ctx, m.Owner, now.Add(-InstanceTTL))
			if err != nil {
				continue
			}
			alive[m.Owner] = ok
		}
		if ok {
			continue
		}
		w.log.Info("warm pool: removing a computer of a supervisor that is gone", "computer", m.ComputerID, "owner", m.Owner)
		if m.State == store.PoolWaiting {
			w.removeWaiting(ctx, m.Provider, m)
		} else if m.MachineID == "" {
			w.st.DeletePoolMember(ctx, m.ComputerID, store.PoolCreating)
		}
	}
	for id, p := range w.providers {
		if pl, ok := p.(Pooler); !ok || poolOff(pl) {
			continue
		}
		ms, err := w.machines(ctx, id)
		if err != nil {
			continue
		}
		for _, mach := range ms {
			if mach.Labels[providers.LabelPool] != "true" {
				continue
			}
			cid := mach.Labels[providers.LabelComputer]
			if m, ok := known[cid]; ok && (m.State == store.PoolClaimed || alive[m.Owner] || m.Owner == w.instance) {
				continue
			}
			if _, ok := known[cid]; !ok {
				// Made after the members were read? Check again.
				if _, err := w.st.GetPoolMember(ctx, cid); !errors.Is(err, store.ErrNotFound) {
					continue
				}
			}
			w.log.Info("warm pool: removing a pool computer no supervisor accounts for", "machine", mach.ID)
			if err := p.Destroy(ctx, mach.ID); err == nil {
				w.st.DeletePoolMember(ctx, cid, "")
			}
		}
	}
}

// PoolStats reports this supervisor's warm pools; see Pool.Stats.
func (s *Service) PoolStats() PoolStats { return s.pool.Stats() }

// RunPool keeps the warm pools filled until ctx ends; see Pool.Run.
func (s *Service) RunPool(ctx context.Context) { s.pool.Run(ctx) }

// DrainPool removes the computers waiting in this supervisor's pools; see
// Pool.Drain.
func (s *Service) DrainPool(ctx context.Context) int { return s.pool.Drain(ctx) }
