package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
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

// Warm-pool policy.
const (
	// PoolGrowFreePercent: the pool grows only while at least this share
	// of the host's memory is available.
	PoolGrowFreePercent = 10
	// PoolShrinkFreePercent: below this share the pool removes a waiting
	// computer each pass.
	PoolShrinkFreePercent = 5

	poolCreators     = 2 // creates in flight per provider
	poolInterval     = time.Second
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

// warmPool is this supervisor's part of the warm pools: the bind secrets
// of the computers it made (only ever in this process's memory) and what
// it is making. The store records the members themselves.
type warmPool struct {
	mu       sync.Mutex
	secrets  map[string]string                      // computer id -> bind secret
	waiting  map[string]map[string]store.PoolMember // provider -> computer id -> member
	creating map[string]int                         // provider -> creates in flight
	failWait map[string]time.Duration               // provider -> backoff after a failed create
	retryAt  map[string]time.Time
	claimed  int64
	collect  time.Time
	wake     chan struct{}
	wg       sync.WaitGroup // creates in flight
}

func (p *warmPool) init() {
	if p.secrets == nil {
		p.secrets = map[string]string{}
		p.waiting = map[string]map[string]store.PoolMember{}
		p.creating = map[string]int{}
		p.failWait = map[string]time.Duration{}
		p.retryAt = map[string]time.Time{}
		p.wake = make(chan struct{}, 1)
	}
}

func (p *warmPool) poke() {
	p.mu.Lock()
	p.init()
	w := p.wake
	p.mu.Unlock()
	select {
	case w <- struct{}{}:
	default:
	}
}

// take removes a claimed member's secret from the pool and returns it.
func (p *warmPool) take(provider, computerID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	secret, ok := p.secrets[computerID]
	delete(p.secrets, computerID)
	delete(p.waiting[provider], computerID)
	if ok {
		p.claimed++
	}
	return secret, ok
}

// PoolStats reports this supervisor's warm pools.
func (s *Service) PoolStats() PoolStats {
	p := &s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PoolStats{Claimed: p.claimed}
	for _, w := range p.waiting {
		st.Waiting += len(w)
	}
	for _, n := range p.creating {
		st.Creating += n
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
	secret, ok := s.pool.take(x.Provider, x.ComputerID)
	err := errors.New("its bind secret is not in this supervisor")
	if ok {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolBindTimeout)
		c := computerd.NewClient(x.Endpoint, secret, computerd.WithHTTPClient(s.http))
		_, err = c.Bind(bctx, computerd.BindRequest{
			TokenHash: token.Hash(s.cfg.Tokens.Derive(token.Computer, x.ComputerID)),
			Env:       s.computerEnv(x.ComputerID),
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

// RunPool keeps the warm pools filled until ctx ends, then waits for the
// creates in flight. DrainPool removes what is left waiting.
func (s *Service) RunPool(ctx context.Context) {
	s.pool.poke()
	for {
		s.fillPools(ctx)
		s.pool.mu.Lock()
		wake := s.pool.wake
		s.pool.mu.Unlock()
		select {
		case <-ctx.Done():
			s.pool.wg.Wait()
			return
		case <-wake:
		case <-time.After(poolInterval):
		}
	}
}

func (s *Service) fillPools(ctx context.Context) {
	for id, p := range s.cfg.Providers {
		if pl, ok := p.(Pooler); ok && pl.PoolSize() > 0 && ctx.Err() == nil {
			s.fillPool(ctx, id, pl)
		}
	}
	s.pool.mu.Lock()
	due := time.Since(s.pool.collect) >= poolCollectEvery
	if due {
		s.pool.collect = time.Now()
	}
	s.pool.mu.Unlock()
	if due && ctx.Err() == nil {
		s.collectPools(ctx)
	}
}

// fillPool starts creates until waiting and creating computers make the
// pool's size, while the host has memory to spare; under memory pressure
// it removes a waiting computer instead.
func (s *Service) fillPool(ctx context.Context, provider string, pl Pooler) {
	grow, shrink := true, false
	if avail, total, err := pl.MemInfo(); err == nil && total > 0 {
		grow = avail*100 >= total*PoolGrowFreePercent
		shrink = avail*100 < total*PoolShrinkFreePercent
	}
	p := &s.pool
	p.mu.Lock()
	p.init()
	if shrink {
		var oldest store.PoolMember
		for _, m := range p.waiting[provider] {
			if oldest.ComputerID == "" || m.CreatedAt.Before(oldest.CreatedAt) {
				oldest = m
			}
		}
		p.mu.Unlock()
		if oldest.ComputerID != "" {
			s.log.Warn("warm pool: host memory low; removing a waiting computer", "provider", provider, "computer", oldest.ComputerID)
			s.removeWaiting(ctx, provider, oldest)
		}
		return
	}
	var stale []store.PoolMember
	for _, m := range p.waiting[provider] {
		if s.clk.Now().Sub(m.CreatedAt) >= providers.PoolMaxWait {
			stale = append(stale, m)
		}
	}
	if len(stale) > 0 {
		p.mu.Unlock()
		// Its machine's expiry label leaves room for one lease after
		// PoolMaxWait (providers.PoolMaxWait): replace it before then.
		for _, m := range stale {
			s.log.Info("warm pool: replacing a computer that waited its longest", "provider", provider, "computer", m.ComputerID)
			s.removeWaiting(ctx, provider, m)
		}
		p.mu.Lock()
	}
	if !grow || time.Now().Before(p.retryAt[provider]) {
		p.mu.Unlock()
		return
	}
	need := pl.PoolSize() - len(p.waiting[provider]) - p.creating[provider]
	var start int
	for ; need > 0 && p.creating[provider] < poolCreators; need-- {
		p.creating[provider]++
		start++
	}
	p.wg.Add(start)
	p.mu.Unlock()
	for range start {
		go func() {
			defer p.wg.Done()
			ok := s.createPooled(ctx, provider, pl)
			p.mu.Lock()
			p.creating[provider]--
			if ok {
				p.failWait[provider] = 0
			} else if ctx.Err() == nil {
				w := min(max(2*p.failWait[provider], time.Second), time.Minute)
				p.failWait[provider], p.retryAt[provider] = w, time.Now().Add(w)
			}
			p.mu.Unlock()
			p.poke()
		}()
	}
}

// createPooled makes one pool computer: recorded first (so that nothing of
// it is ever unaccounted for), created, waited for, then offered. A create
// is never cut short (the engine may finish what it was asked after the
// caller gave up): at shutdown RunPool waits for it, and DrainPool removes
// the computer.
func (s *Service) createPooled(ctx context.Context, provider string, pl Pooler) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	dep, err := s.Deployment(ctx)
	if err != nil {
		return false
	}
	secret, err := token.NewSecret(32)
	if err != nil {
		return false
	}
	m := store.PoolMember{
		ComputerID: newID("p"), Provider: provider, Image: providers.ImageHeadless, AttemptID: newID("a_"),
		Owner: s.instance, State: store.PoolCreating, CreatedAt: s.clk.Now().UTC(),
	}
	log := s.log.With("provider", provider, "computer", m.ComputerID)
	if err := s.st.AddPoolMember(ctx, m); err != nil {
		log.Warn("warm pool: record a new computer", "err", err)
		return false
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
		return false
	}
	if err := s.waitPooled(ctx, mach.Endpoint); err != nil {
		if ctx.Err() == nil {
			log.Warn("warm pool: computer did not become ready", "machine", mach.ID, "err", err)
		}
		forget(mach.ID)
		return false
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
		return false
	}
	s.pool.mu.Lock()
	if _, ok := s.pool.secrets[m.ComputerID]; ok { // not claimed already
		if s.pool.waiting[provider] == nil {
			s.pool.waiting[provider] = map[string]store.PoolMember{}
		}
		s.pool.waiting[provider][m.ComputerID] = m
	}
	s.pool.mu.Unlock()
	log.Debug("warm pool: computer waiting", "machine", mach.ID)
	return true
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
	delete(s.pool.waiting[provider], m.ComputerID)
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
	s.pool.mu.Lock()
	var all []store.PoolMember
	for _, w := range s.pool.waiting {
		for _, m := range w {
			all = append(all, m)
		}
	}
	s.pool.mu.Unlock()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for _, m := range all {
		wg.Go(func() {
			if s.removeWaiting(ctx, m.Provider, m) {
				mu.Lock()
				n++
				mu.Unlock()
			}
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
