package supervisor

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// Suspended computers (api.PersistenceMemory). Such a computer sleeps as a
// PersistenceHome one does (its home archived, its session ended and
// charged) and then, in place of being destroyed, its machine is
// suspended by the provider (providers.Suspender): the session that slept
// keeps the machine's id with Home HomeSuspended. The next start resumes
// that machine for the new session, which takes over the old one's
// computer id (the machine's token is derived from it), and marks the old
// session HomeArchived: the machine is the new session's from then on.
//
// A suspended machine that cannot be resumed (removed by the provider,
// made on an image that changed since, refused by the runtime) is dropped
// and the start wakes from the home archive, without the processes. So is
// one that a start from a named checkpoint, or a disconnect, leaves
// behind. A dropped machine's session is marked HomeArchived before the
// machine is destroyed: when the destroy fails, the reconciler finds a
// machine no session keeps and removes it.

// suspendCheckTimeout bounds the provider's answer to whether it can
// suspend machines.
const suspendCheckTimeout = 15 * time.Second

// canSuspend checks that provider's machines can be suspended here.
func (s *Service) canSuspend(ctx context.Context, provider string) error {
	sp, ok := s.cfg.Providers[provider].(providers.Suspender)
	if !ok {
		return badRequest("persistence: %q keeps processes by suspending the machine, which the %s provider cannot do; %q keeps the home folder's files",
			api.PersistenceMemory, provider, api.PersistenceHome)
	}
	ctx, cancel := context.WithTimeout(ctx, suspendCheckTimeout)
	defer cancel()
	if err := sp.CanSuspend(ctx); err != nil {
		return badRequest("persistence: %q is not available on the %s provider here: %v; %q keeps the home folder's files",
			api.PersistenceMemory, provider, err, api.PersistenceHome)
	}
	return nil
}

// suspendAtEnd suspends the machine of ending session x, whose home is
// archived, when its connection keeps processes. It reports whether it
// did; x is then recorded as ended, with its machine kept.
func (s *Service) suspendAtEnd(ctx context.Context, x store.Session) (store.Session, bool) {
	if x.Home != store.HomeArchived || x.MachineID == "" {
		return x, false
	}
	c, err := s.st.GetConnection(ctx, x.AgentID)
	if err != nil || c.Persistence != api.PersistenceMemory || c.Provider != x.Provider {
		return x, false
	}
	sp, ok := s.cfg.Providers[x.Provider].(providers.Suspender)
	if !ok {
		return x, false
	}
	sctx, cancel := context.WithTimeout(s.withCredentials(ctx, x.AgentID), s.cfg.ArchiveTimeout)
	err = sp.Suspend(sctx, x.MachineID)
	cancel()
	log := s.log.With("agent", x.AgentID, "session", x.ID, "machine", x.MachineID)
	if err != nil {
		// The home is archived: the next start wakes from it.
		log.Warn("suspend failed; removing the machine (the home is archived, its processes are lost)", "err", err)
		return x, false
	}
	y := x
	y.Home = store.HomeSuspended
	y.State = finalState(x)
	y.NextCleanupAt = time.Time{}
	if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
		log.Warn("record the suspended machine; the cleanup retries", "err", err)
		return x, true
	}
	log.Info("session ended; machine suspended", "state", y.State, "charged", y.ChargedSeconds)
	return y, true
}

// suspendedOf returns the session whose suspended machine the next start
// of connection c resumes: the session of its last sleep, when that kept
// its machine. ok is false when there is none.
func (s *Service) suspendedOf(ctx context.Context, c store.Connection) (store.Session, bool, error) {
	if c.Persistence != api.PersistenceMemory {
		return store.Session{}, false, nil
	}
	a, err := s.st.GetArchive(ctx, c.AgentID, store.SleepArchive)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, false, nil
	}
	if err != nil {
		return store.Session{}, false, err
	}
	return s.keeper(ctx, a)
}

// keeper returns the session that made sleep archive a when it keeps its
// machine suspended; ok is false otherwise.
func (s *Service) keeper(ctx context.Context, a store.Archive) (prev store.Session, ok bool, err error) {
	prev, err = s.st.GetSession(ctx, a.SessionID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, false, nil
	}
	if err != nil {
		return store.Session{}, false, err
	}
	return prev, prev.Home == store.HomeSuspended && prev.MachineID != "", nil
}

// resume resumes the suspended machine of session prev for starting
// session x, which holds prev's computer id. On success x runs on it and
// prev no longer keeps it. On failure prev's machine is dropped and x
// ended without a charge; the caller starts again, from the archive.
func (s *Service) resume(ctx context.Context, x *store.Session, prev store.Session) error {
	log := s.log.With("agent", x.AgentID, "session", x.ID, "machine", prev.MachineID)
	sp, ok := s.cfg.Providers[prev.Provider].(providers.Suspender)
	err := errors.New("the provider cannot resume machines")
	var m providers.Machine
	if ok && prev.Provider == x.Provider {
		rctx, cancel := context.WithTimeout(s.withCredentials(ctx, x.AgentID), s.cfg.ArchiveTimeout)
		m, err = sp.Resume(rctx, prev.MachineID)
		cancel()
	}
	if err == nil {
		err = s.adopt(ctx, x, m)
		if err == nil {
			if uerr := s.handOver(context.WithoutCancel(ctx), prev); uerr != nil {
				log.Warn("hand the resumed machine over", "from", prev.ID, "err", uerr)
			}
			log.Info("resumed", "from", prev.ID)
			return nil
		}
		if errors.Is(err, errNotReady) {
			// adopt ended x, and its cleanup removes the machine.
			s.handOver(context.WithoutCancel(ctx), prev)
			return err
		}
	}
	log.Warn("resume failed; waking from the home archive", "err", err)
	s.abandon(context.WithoutCancel(ctx), *x, "resume the suspended machine: "+err.Error())
	s.dropSuspended(context.WithoutCancel(ctx), prev)
	return err
}

// handOver marks session prev as no longer keeping its machine.
func (s *Service) handOver(ctx context.Context, prev store.Session) error {
	y := prev
	y.Home = store.HomeArchived
	if err := s.st.UpdateSession(ctx, y, prev.State); err != nil {
		return err
	}
	s.pool.forget(ctx, prev)
	return nil
}

// dropSuspended gives up the suspended machine of session prev: prev no
// longer keeps it, and it is destroyed (or, when that fails, removed by
// the reconciler as a machine no session keeps).
func (s *Service) dropSuspended(ctx context.Context, prev store.Session) error {
	if err := s.handOver(ctx, prev); err != nil {
		return err
	}
	p, err := s.provider(prev.Provider)
	if err == nil {
		dctx, cancel := context.WithTimeout(s.withCredentials(ctx, prev.AgentID), 2*time.Minute)
		err = p.Destroy(dctx, prev.MachineID)
		cancel()
	}
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		s.log.Warn("destroy a suspended machine; the reconciler removes it", "session", prev.ID, "machine", prev.MachineID, "err", err)
		return nil
	}
	s.log.Info("suspended machine dropped", "agent", prev.AgentID, "session", prev.ID, "machine", prev.MachineID)
	return nil
}

// dropSuspendedOf drops the suspended machine of agent's connection c, if
// it has one (see Disconnect).
func (s *Service) dropSuspendedOf(ctx context.Context, c store.Connection) error {
	prev, ok, err := s.suspendedOf(ctx, c)
	if err != nil || !ok {
		return err
	}
	if err := s.dropSuspended(ctx, prev); err != nil {
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "drop the suspended machine of session %s: %v", prev.ID, err)
	}
	return nil
}
