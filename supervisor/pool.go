package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/internal/warmpool"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// Pooler is a provider that can keep computers started ahead of time: the
// warm pool (the docker provider, WARM_POOL_SIZE). Each waits unbound until
// a start claims it and binds it to its session.
type Pooler interface {
	// PoolSize is how many computers to keep waiting; 0 turns the pool off.
	PoolSize() int
	// CreatePooled starts a headless computer that waits for the holder of
	// the bind secret whose hex SHA-256 is bindHash.
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

// warmPool is this supervisor's part of the warm pools: one pool per
// provider that keeps one, and the bind secrets of the computers it made
// (only ever in this process's memory). The store records the members
// themselves.
type warmPool struct {
	once    sync.Once
	mu      sync.Mutex        // guards secrets and the pools' state
	secrets map[string]string // computer id -> bind secret
	pools   map[string]*warmpool.Pool[store.PoolMember]
}

// warmPools returns the warm pools by provider, made on first use.
func (s *Service) warmPools() map[string]*warmpool.Pool[store.PoolMember] {
	w := &s.pool
	w.once.Do(func() {
		pools := map[string]*warmpool.Pool[store.PoolMember]{}
		for id, p := range s.cfg.Providers {
			if pl, ok := p.(Pooler); ok {
				pools[id] = s.newWarmPool(id, pl)
			}
		}
		w.mu.Lock()
		w.secrets, w.pools = map[string]string{}, pools
		w.mu.Unlock()
	})
	return w.pools
}

// newWarmPool is the warm pool of provider id: its members wait in the
// store until a start claims one there.
func (s *Service) newWarmPool(id string, pl Pooler) *warmpool.Pool[store.PoolMember] {
	return warmpool.New(warmpool.Config[store.PoolMember]{
		Clock: s.clk, Logger: s.log.With("provider", id), Locker: &s.pool.mu, MaxWait: providers.PoolMaxWait,
		Ready:   func() bool { return pl.PoolSize() > 0 },
		MemInfo: pl.MemInfo,
		Target: func(time.Time, warmpool.Stats) (int, int) {
			return pl.PoolSize(), warmpool.Unlimited
		},
		Create: func(ctx context.Context) (store.PoolMember, error) { return s.createPooled(ctx, id, pl) },
		Accept: func(m store.PoolMember, _ warmpool.Stats) warmpool.Verdict {
			if _, ok := s.pool.secrets[m.ComputerID]; !ok {
				return warmpool.Taken // claimed as soon as the store offered it
			}
			return warmpool.Keep
		},
		Remove: func(ctx context.Context, m store.PoolMember, _ string) bool { return s.removeWaiting(ctx, id, m) },
		ID:     func(m store.PoolMember) string { return m.ComputerID },
		Made:   func(m store.PoolMember) time.Time { return m.CreatedAt },
	})
}

// poke asks every warm pool for a pass.
func (w *warmPool) poke() {
	w.mu.Lock()
	pools := w.pools
	w.mu.Unlock()
	for _, p := range pools {
		p.Poke()
	}
}

// takePooled removes a claimed member's secret from the pool and returns it.
func (s *Service) takePooled(provider, computerID string) (string, bool) {
	pools := s.warmPools()
	s.pool.mu.Lock()
	secret, ok := s.pool.secrets[computerID]
	delete(s.pool.secrets, computerID)
	s.pool.mu.Unlock()
	if p := pools[provider]; ok && p != nil {
		p.Claimed(computerID)
	}
	return secret, ok
}

// PoolStats reports this supervisor's warm pools.
func (s *Service) PoolStats() PoolStats {
	var st PoolStats
	for _, p := range s.warmPools() {
		ps := p.Stats()
		st.Waiting += ps.Waiting
		st.Creating += ps.Creating
		st.Claimed += ps.Claimed
	}
	return st
}

// poolOwner is the PoolOwner of a reservation for connection c: this
// instance when c's provider keeps a warm pool of c's image.
func (s *Service) poolOwner(c store.Connection) string {
	pl, ok := s.cfg.Providers[c.Provider].(Pooler)
	if !ok || pl.PoolSize() <= 0 || (c.Image != "" && c.Image != providers.ImageHeadless) {
		return ""
	}
	return s.instance
}

// bindPooled binds the pool computer that the reservation x claimed to x:
// the session's token hash and the computer's environment, in one call
// with the bind secret. It returns false when the computer could not be
// bound; it is then being destroyed and x has ended without a charge.
func (s *Service) bindPooled(ctx context.Context, x *store.Session) bool {
	defer s.pool.poke()
	log := s.log.With("agent", x.AgentID, "session", x.ID, "computer", x.ComputerID)
	secret, ok := s.takePooled(x.Provider, x.ComputerID)
	err := errors.New("its bind secret is not in this supervisor")
	if ok {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolBindTimeout)
		c := computerd.NewClient(x.Endpoint, secret, computerd.WithHTTPClient(s.http))
		_, err = c.Bind(bctx, computerd.BindRequest{
			TokenHash: token.Hash(s.cfg.Tokens.Derive(token.Computer, x.ComputerID)),
			Env:       s.computerEnv(x.Provider, x.ComputerID),
		})
		cancel()
	}
	if err == nil {
		y := *x
		y.State = store.StateRunning
		if err = s.st.UpdateSession(context.WithoutCancel(ctx), y, x.State); err == nil {
			*x = y
			log.Info("started from the warm pool", "machine", x.MachineID, "reserved", x.ReservedSeconds)
			return true
		}
	}
	log.Warn("bind of a pooled computer failed; removing it", "machine", x.MachineID, "err", err)
	y := *x
	y.State = store.StateStopping
	y.EndedAt = s.clk.Now()
	y.ChargedSeconds = 0
	y.NextCleanupAt = s.clk.Now().Add(reapClaim)
	y.LastError = "bind of a pooled computer failed: " + err.Error()
	if uerr := s.st.UpdateSession(context.WithoutCancel(ctx), y, x.State); uerr == nil {
		s.cleanup(context.WithoutCancel(ctx), y)
	}
	return false
}

// forgetPooled removes the pool record of a destroyed computer, if it was one.
func (s *Service) forgetPooled(ctx context.Context, x store.Session) {
	if _, ok := s.cfg.Providers[x.Provider].(Pooler); !ok {
		return
	}
	if err := s.st.DeletePoolMember(ctx, x.ComputerID, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("forget pool member", "computer", x.ComputerID, "err", err)
	}
}

// RunPool keeps the warm pools filled and collects what pools of dead
// supervisors left until ctx ends, then waits for the creates in flight.
// DrainPool removes what is left waiting.
func (s *Service) RunPool(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range s.warmPools() {
		wg.Go(func() { p.Run(ctx) })
	}
	wg.Go(func() {
		for {
			s.collectPools(ctx)
			select {
			case <-ctx.Done():
				return
			case <-s.clk.After(poolCollectEvery):
			}
		}
	})
	wg.Wait()
}

// createPooled makes one pool computer: recorded first (so that nothing of
// it is ever unaccounted for), created, waited for, then offered; its pool
// keeps it unless a start claimed it at once. A create
// is never cut short (the engine may finish what it was asked after the
// caller gave up): at shutdown RunPool waits for it, and DrainPool removes
// the computer.
func (s *Service) createPooled(ctx context.Context, provider string, pl Pooler) (store.PoolMember, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	dep, err := s.Deployment(ctx)
	if err != nil {
		return store.PoolMember{}, err
	}
	secret, err := token.NewSecret(32)
	if err != nil {
		return store.PoolMember{}, err
	}
	m := store.PoolMember{
		ComputerID: newID("p"), Provider: provider, Image: providers.ImageHeadless, AttemptID: newID("a_"),
		Owner: s.instance, State: store.PoolCreating, CreatedAt: s.clk.Now().UTC(),
	}
	log := s.log.With("provider", provider, "computer", m.ComputerID)
	if err := s.st.AddPoolMember(ctx, m); err != nil {
		log.Warn("warm pool: record a new computer", "err", err)
		return store.PoolMember{}, err
	}
	forget := func(machineID string) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if machineID != "" {
			if err := s.cfg.Providers[provider].Destroy(cctx, machineID); err != nil && !errors.Is(err, providers.ErrNotFound) {
				log.Warn("warm pool: remove a computer that did not come up", "err", err)
				return // the record stays, so the collector retries
			}
		}
		s.st.DeletePoolMember(cctx, m.ComputerID, "")
	}
	mach, err := pl.CreatePooled(ctx, providers.Spec{
		ComputerID: m.ComputerID, AttemptID: m.AttemptID, Deployment: dep, Image: providers.ImageHeadless,
	}, token.Hash(secret))
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("warm pool: create a computer", "err", err)
		}
		forget("")
		return store.PoolMember{}, err
	}
	if err := s.waitPooled(ctx, mach.Endpoint); err != nil {
		if ctx.Err() == nil {
			log.Warn("warm pool: computer did not become ready", "machine", mach.ID, "err", err)
		}
		forget(mach.ID)
		return store.PoolMember{}, err
	}
	m.MachineID, m.Endpoint, m.State = mach.ID, mach.Endpoint, store.PoolWaiting
	// The secret is in place before the store offers the computer.
	s.pool.mu.Lock()
	s.pool.secrets[m.ComputerID] = secret
	s.pool.mu.Unlock()
	if err := s.st.UpdatePoolMember(context.WithoutCancel(ctx), m, store.PoolCreating); err != nil {
		log.Warn("warm pool: offer a computer", "err", err)
		s.pool.mu.Lock()
		delete(s.pool.secrets, m.ComputerID)
		s.pool.mu.Unlock()
		forget(mach.ID)
		return store.PoolMember{}, err
	}
	return m, nil
}

// waitPooled waits for a pool computer's daemon to answer its health check.
func (s *Service) waitPooled(ctx context.Context, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, poolReadyTimeout)
	defer cancel()
	return computerd.NewClient(endpoint, "", computerd.WithHTTPClient(s.http)).WaitHealthy(ctx)
}

// removeWaiting takes a waiting member out of the store (so no start can
// claim it) and destroys it.
func (s *Service) removeWaiting(ctx context.Context, provider string, m store.PoolMember) bool {
	if err := s.st.DeletePoolMember(ctx, m.ComputerID, store.PoolWaiting); err != nil {
		return false // claimed meanwhile, or gone
	}
	s.pool.mu.Lock()
	delete(s.pool.secrets, m.ComputerID)
	s.pool.mu.Unlock()
	p, ok := s.cfg.Providers[provider]
	if !ok || m.MachineID == "" {
		return true
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := p.Destroy(dctx, m.MachineID); err != nil && !errors.Is(err, providers.ErrNotFound) {
		s.log.Warn("warm pool: remove a waiting computer", "machine", m.MachineID, "err", err)
	}
	return true
}

// DrainPool removes the computers waiting in this supervisor's pools; a
// supervisor calls it when it shuts down, after RunPool has returned.
func (s *Service) DrainPool(ctx context.Context) int {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for _, p := range s.warmPools() {
		wg.Go(func() {
			k := p.Drain(ctx, "the supervisor is shutting down")
			mu.Lock()
			n += k
			mu.Unlock()
		})
	}
	wg.Wait()
	if n > 0 {
		s.log.Info("warm pool: removed the waiting computers", "n", n)
	}
	return n
}

// collectPools removes what pools of dead supervisors left: members still
// creating or waiting whose owner no longer beats (nobody holds their bind
// secret), and pool machines of this deployment that no record accounts
// for. Claimed members belong to their sessions.
func (s *Service) collectPools(ctx context.Context) {
	members, err := s.st.PoolMembers(ctx)
	if err != nil {
		return
	}
	now := s.clk.Now()
	known := map[string]store.PoolMember{}
	alive := map[string]bool{s.instance: true}
	for _, m := range members {
		known[m.ComputerID] = m
		if m.State == store.PoolClaimed {
			continue
		}
		ok, seen := alive[m.Owner]
		if !seen {
			ok, err = s.st.InstanceAlive(ctx, m.Owner, now.Add(-InstanceTTL))
			if err != nil {
				continue
			}
			alive[m.Owner] = ok
		}
		if ok {
			continue
		}
		s.log.Info("warm pool: removing a computer of a supervisor that is gone", "computer", m.ComputerID, "owner", m.Owner)
		if m.State == store.PoolWaiting {
			s.removeWaiting(ctx, m.Provider, m)
		} else if m.MachineID == "" {
			s.st.DeletePoolMember(ctx, m.ComputerID, store.PoolCreating)
		}
	}
	for id, p := range s.cfg.Providers {
		if pl, ok := p.(Pooler); !ok || pl.PoolSize() <= 0 {
			continue
		}
		ms, err := s.listMachines(ctx, id)
		if err != nil {
			continue
		}
		for _, mach := range ms {
			if mach.Labels[providers.LabelPool] != "true" {
				continue
			}
			cid := mach.Labels[providers.LabelComputer]
			if m, ok := known[cid]; ok && (m.State == store.PoolClaimed || alive[m.Owner] || m.Owner == s.instance) {
				continue
			}
			if _, ok := known[cid]; !ok {
				// Made after the members were read? Check again.
				if _, err := s.st.GetPoolMember(ctx, cid); !errors.Is(err, store.ErrNotFound) {
					continue
				}
			}
			s.log.Info("warm pool: removing a pool computer no supervisor accounts for", "machine", mach.ID)
			if err := p.Destroy(ctx, mach.ID); err == nil {
				s.st.DeletePoolMember(ctx, cid, "")
			}
		}
	}
}
