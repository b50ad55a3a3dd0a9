package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// Cleanup backoff: a failed destroy is retried after 1 s, doubling up to
// 5 minutes, with jitter. After CleanupFailedAfter failures the session shows
// as cleanup_failed and is retried at most every 10 minutes until it works
// or a person confirms the cleanup.
const (
	CleanupFailedAfter = 5
	cleanupBase        = time.Second
	cleanupMax         = 5 * time.Minute
	cleanupFailedMax   = 10 * time.Minute

	// startClaim is how long a start owns its session before another
	// supervisor may resolve it as orphaned (its owner must also be dead).
	startClaim = 5 * time.Minute
	// reapClaim is how long a reaper owns a session it acts on.
	reapClaim = 2 * time.Minute
	// purgeEvery is how often the reaper deletes expired call records and
	// lapsed viewer seats.
	purgeEvery = time.Minute
)

// Start starts the agent's computer, or returns the one that is running.
// With a warm pool it claims a waiting computer and binds it.
func (s *Service) Start(ctx context.Context, agent string) (SessionView, error) {
	return s.start(ctx, agent, "", true)
}

// StartFrom starts the agent's persistent computer from one of its
// checkpoints. It is refused while the computer runs.
func (s *Service) StartFrom(ctx context.Context, agent, checkpoint string) (SessionView, error) {
	if checkpoint == "" {
		return s.Start(ctx, agent)
	}
	if err := checkCheckpointName("checkpoint", checkpoint); err != nil {
		return SessionView{}, err
	}
	return s.start(ctx, agent, checkpoint, true)
}

func (s *Service) start(ctx context.Context, agent, checkpoint string, warm bool) (SessionView, error) {
	c, err := s.connection(ctx, agent)
	if err != nil {
		return SessionView{}, err
	}
	p, err := s.provider(c.Provider)
	if err != nil {
		return SessionView{}, err
	}
	dep, err := s.Deployment(ctx)
	if err != nil {
		return SessionView{}, err
	}
	now := s.clk.Now()
	id := newID("s_")
	r := store.Reservation{
		Session: store.Session{
			ID: id, AgentID: agent, ComputerID: id[2:], AttemptID: newID("a_"),
			Owner: s.instance, ClaimUntil: now.Add(startClaim),
		},
		Now: now, MinSeconds: MinLeaseSeconds,
	}
	if err := s.homeOf(ctx, c, checkpoint, &r.Session, now); err != nil {
		return SessionView{}, err
	}
	prev, suspended, err := s.suspendedOf(ctx, c)
	if err != nil {
		return SessionView{}, err
	}
	resume := suspended && checkpoint == ""
	if resume {
		// The suspended machine holds the home, and knows the token of
		// its computer id.
		r.Session.ComputerID = prev.ComputerID
		r.Session.Home, r.Session.WakeFrom = store.HomeLive, ""
	} else if warm {
		r.PoolOwner = s.pool.owner(c)
	}
	x, err := s.st.Reserve(ctx, r)
	var be *store.BudgetError
	switch {
	case errors.As(err, &be):
		return SessionView{}, errorf(http.StatusConflict, CodeBudget,
			"daily budget: %d s left today, a session needs at least %d s; the budget resets at %s",
			be.LeftSeconds, be.MinSeconds, be.ResetsAt.Format(time.RFC3339))
	case errors.Is(err, store.ErrLive):
		if x.State == store.StateRunning && !s.clk.Now().Before(x.ExpiresAt) {
			// Expired but not reaped yet: end it now and start afresh.
			s.endSession(context.WithoutCancel(ctx), x, "")
			return s.start(ctx, agent, checkpoint, warm)
		}
		if checkpoint != "" {
			return SessionView{}, errorf(http.StatusConflict, CodeConflict, "agent %q's computer is %s; stop it before starting from checkpoint %q", agent, x.State, checkpoint)
		}
		return s.joinStart(ctx, agent, warm, x)
	case err != nil:
		return SessionView{}, fmt.Errorf("reserve for %s: %w", agent, err)
	}
	switch {
	case resume:
		if err := s.resume(ctx, &x, prev); err != nil {
			if errors.Is(err, errNotReady) {
				return SessionView{}, s.adoptError(err)
			}
			return s.start(ctx, agent, checkpoint, warm) // from the archive
		}
		return s.started(ctx, x)
	case suspended:
		// A start from a named checkpoint: the suspended machine's
		// processes belong to the last sleep, which it replaces.
		s.dropSuspended(context.WithoutCancel(ctx), prev)
	}
	if r.PoolOwner != "" {
		s.pool.wanted(x.Provider, x.Image) // counts toward the pool's size, and refills behind this start
	}
	if x.MachineID != "" {
		// The reservation claimed a computer of the warm pool.
		if s.bindPooled(ctx, &x) {
			return s.started(ctx, x)
		}
		return s.start(ctx, agent, checkpoint, false)
	}
	log := s.log.With("agent", agent, "session", x.ID, "provider", x.Provider)
	creds, err := s.credentials(c)
	if err != nil {
		s.abandon(ctx, x, startFailure(AsError(err)))
		return SessionView{}, err
	}
	spec := providers.Spec{
		ComputerID: x.ComputerID, SessionID: x.ID, AttemptID: x.AttemptID, AgentID: agent, Image: x.Image,
		Deployment:  dep,
		TokenHash:   token.Hash(s.cfg.Tokens.Derive(token.Computer, x.ComputerID)),
		Env:         s.computerEnv(x.Provider, x.ComputerID),
		Lease:       time.Duration(x.ReservedSeconds) * time.Second,
		Credentials: creds,

		BrowserRecording: c.BrowserRecording, BrowserProxyCountry: c.BrowserProxyCountry,
	}
	m, err := p.Create(ctx, spec)
	if err != nil {
		return s.createFailed(context.WithoutCancel(ctx), p, x, err)
	}
	if err := s.adopt(ctx, &x, m); err != nil {
		return SessionView{}, s.adoptError(err)
	}
	log.Info("started", "machine", m.ID, "reserved", x.ReservedSeconds)
	return s.started(ctx, x)
}

// bindPooled binds the pool computer that the reservation x claimed to x:
// the session's token hash and the computer's environment, in one call
// with the bind secret. It returns false when the computer could not be
// bound; it is then being destroyed and x has ended without a charge.
func (s *Service) bindPooled(ctx context.Context, x *store.Session) bool {
	defer s.pool.poke()
	log := s.log.With("agent", x.AgentID, "session", x.ID, "computer", x.ComputerID)
	secret, ok := s.pool.take(x.Provider, x.Image, x.ComputerID)
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

// joinStart answers a start that found session x live: a running session
// is returned, a starting one is waited for, an uncertain one is refused
// until a person confirms the cleanup. A start that failed answers its
// error to every start that waited on it. When x ended some other way (its
// computer was stopped as soon as it ran, or a warm-pool bind failed and
// its start goes on with a new session), the start begins again.
func (s *Service) joinStart(ctx context.Context, agent string, warm bool, x store.Session) (SessionView, error) {
	x, err := s.awaitStarting(ctx, x)
	if err != nil {
		return SessionView{}, err
	}
	switch x.State {
	case store.StateRunning:
		return s.started(ctx, x)
	case store.StateUncertain:
		v := s.view(x)
		return v, errorf(http.StatusConflict, CodeUncertain, "session %s is uncertain: %s", x.ID, v.Message)
	}
	if e, ok := parseStartFailure(x.LastError); ok {
		return SessionView{}, e
	}
	return s.start(ctx, agent, "", warm)
}

// awaitLive waits while session x is starting, then answers it: a running
// or ended session is returned, an uncertain one is refused until a person
// confirms the cleanup.
func (s *Service) awaitLive(ctx context.Context, x store.Session) (SessionView, error) {
	x, err := s.awaitStarting(ctx, x)
	if err != nil {
		return SessionView{}, err
	}
	if x.State == store.StateUncertain {
		v := s.view(x)
		return v, errorf(http.StatusConflict, CodeUncertain, "session %s is uncertain: %s", x.ID, v.Message)
	}
	return s.view(x), nil
}

// awaitStarting waits while session x is starting and returns it as it is
// then.
func (s *Service) awaitStarting(ctx context.Context, x store.Session) (store.Session, error) {
	wait := 10 * time.Millisecond
	for x.State == store.StateStarting {
		select {
		case <-ctx.Done():
			return x, errorf(http.StatusServiceUnavailable, CodeUnavailable, "session %s is still starting; retry the call", x.ID)
		case <-time.After(wait):
		}
		wait = min(wait*2, 250*time.Millisecond)
		var err error
		if x, err = s.st.GetSession(ctx, x.ID); err != nil {
			return x, err
		}
	}
	return x, nil
}

func (s *Service) credentials(c store.Connection) (map[string]string, error) {
	raw, err := s.cfg.Box.Open(string(c.Credentials), credentialsAD(c.AgentID))
	if err != nil {
		return nil, fmt.Errorf("open credentials of %s: %w", c.AgentID, err)
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decode credentials of %s: %w", c.AgentID, err)
	}
	return m, nil
}

// bind records the machine of a starting session and marks it running.
func (s *Service) bind(ctx context.Context, x *store.Session, m providers.Machine) error {
	y := *x
	y.State = store.StateRunning
	y.MachineID = m.ID
	y.Endpoint = m.Endpoint
	if len(m.Header) > 0 {
		h, _ := json.Marshal(m.Header)
		y.Header = string(h)
	}
	if err := s.st.UpdateSession(context.WithoutCancel(ctx), y, x.State); err != nil {
		return fmt.Errorf("bind session %s to %s: %w", x.ID, m.ID, err)
	}
	*x = y
	return nil
}

// errNotReady: a machine was bound to its session but its daemon never
// answered; the session has been ended and the machine is being removed.
var errNotReady = errors.New("computer did not become ready")

// adopt binds machine m to the starting or uncertain session x and waits for
// its daemon. A machine that never answers ends the session (errNotReady).
func (s *Service) adopt(ctx context.Context, x *store.Session, m providers.Machine) error {
	if err := s.bind(ctx, x, m); err != nil {
		return err
	}
	if err := s.waitReady(ctx, *x); err != nil {
		s.log.Warn("computer did not become ready; ending its session", "session", x.ID, "machine", m.ID, "err", err)
		s.endSession(context.WithoutCancel(ctx), *x, startFailure(AsError(s.adoptError(errNotReady))))
		return errNotReady
	}
	return nil
}

// adoptError is what a tool call answers when adopt failed.
func (s *Service) adoptError(err error) error {
	if errors.Is(err, errNotReady) {
		return errorf(http.StatusBadGateway, CodeProvider, "the computer did not become ready within %s", s.cfg.ReadyTimeout)
	}
	return err
}

// definite reports whether a create error says for sure that no machine was
// left behind.
func definite(err error) bool {
	return errors.Is(err, providers.ErrBadImage) || errors.Is(err, providers.ErrBadCredentials) ||
		errors.Is(err, providers.ErrCapacity) || errors.Is(err, providers.ErrUnknown) ||
		errors.Is(err, providers.ErrRefused)
}

// createFailed handles a failed create. A definite failure gives the
// reservation back. Otherwise the provider may have made the machine: it is
// searched for by the attempt's label and adopted, or the session becomes
// uncertain and no other machine is created until a person confirms.
func (s *Service) createFailed(ctx context.Context, p providers.Provider, x store.Session, cerr error) (SessionView, error) {
	log := s.log.With("agent", x.AgentID, "session", x.ID, "attempt", x.AttemptID)
	if definite(cerr) {
		log.Warn("create failed", "err", cerr)
		e := providerError(cerr)
		s.abandon(ctx, x, startFailure(e))
		return SessionView{}, e
	}
	if l, ok := p.(providers.Lister); ok {
		ms, lerr := l.List(s.withCredentials(ctx, x.AgentID))
		if lerr == nil {
			for _, m := range ms {
				if m.Labels[providers.LabelAttempt] == x.AttemptID {
					log.Info("create reply lost; adopting the machine found by its attempt label", "machine", m.ID)
					if err := s.adopt(ctx, &x, m); err != nil {
						return SessionView{}, s.adoptError(err)
					}
					return s.started(ctx, x)
				}
			}
		}
	}
	y := x
	y.State = store.StateUncertain
	y.LastError = cerr.Error()
	if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
		return SessionView{}, err
	}
	log.Warn("create outcome uncertain", "err", cerr)
	v := s.view(y)
	return v, errorf(http.StatusBadGateway, CodeUncertain, "the provider may have created a machine whose reply was lost: %s", v.Message)
}

// abandon ends a session that never got a machine; its time comes back.
func (s *Service) abandon(ctx context.Context, x store.Session, reason string) {
	y := x
	y.State = store.StateStopped
	y.ChargedSeconds = 0
	y.EndedAt = s.clk.Now()
	y.LastError = reason
	if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
		s.log.Error("abandon session", "session", x.ID, "err", err)
	}
}

// A start that failed for sure records the error it answered as its
// session's LastError, "start failed: <status> <code>: <message>", so that
// every start that waited on it, on any supervisor sharing the store,
// answers the same error.
const startFailedPrefix = "start failed: "

// startFailure is the LastError of a session whose start answered e.
func startFailure(e *Error) string {
	return fmt.Sprintf("%s%d %s: %s", startFailedPrefix, e.Status, e.Code, e.Message)
}

// parseStartFailure returns the error that a session's start answered, if
// lastError records one.
func parseStartFailure(lastError string) (*Error, bool) {
	rest, ok := strings.CutPrefix(lastError, startFailedPrefix)
	if !ok {
		return nil, false
	}
	head, msg, ok := strings.Cut(rest, ": ")
	if !ok {
		return nil, false
	}
	num, code, ok := strings.Cut(head, " ")
	status, err := strconv.Atoi(num)
	if !ok || err != nil || status < 400 || status > 599 || code == "" {
		return nil, false
	}
	return &Error{Status: status, Code: code, Message: msg}, true
}

func providerError(err error) *Error {
	if re := new(providers.RefusedError); errors.As(err, &re) {
		status := re.Status
		if status < 400 || status > 599 || status == http.StatusInternalServerError {
			status = http.StatusBadGateway
		}
		return errorf(status, re.Code, "%s", re.Message)
	}
	switch {
	case errors.Is(err, providers.ErrBadImage):
		return errorf(http.StatusBadGateway, CodeProvider, "%v", err)
	case errors.Is(err, providers.ErrBadCredentials):
		return errorf(http.StatusBadGateway, CodeProvider, "the provider refused the connection's credentials")
	case errors.Is(err, providers.ErrCapacity):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the provider is out of quota or capacity")
	default:
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the provider failed; retry later")
	}
}

// waitReady polls computerd's health until it answers or ReadyTimeout passes.
func (s *Service) waitReady(ctx context.Context, x store.Session) error {
	c, err := s.client(ctx, x)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	return c.WaitHealthy(ctx)
}

// Stop stops and discards the agent's computer.
func (s *Service) Stop(ctx context.Context, agent string) (SessionView, error) {
	if _, err := s.connection(ctx, agent); err != nil {
		return SessionView{}, err
	}
	x, err := s.st.LiveSession(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		return SessionView{}, errorf(http.StatusConflict, CodeNoSession, "agent %q has no running computer", agent)
	}
	if err != nil {
		return SessionView{}, err
	}
	switch x.State {
	case store.StateUncertain:
		v := s.view(x)
		return v, errorf(http.StatusConflict, CodeUncertain, "session %s is uncertain: %s", x.ID, v.Message)
	case store.StateStarting:
		if x, err := s.awaitLive(ctx, x); err != nil || x.State != store.StateRunning {
			return x, err
		}
		return s.Stop(ctx, agent)
	}
	y := s.endSession(context.WithoutCancel(ctx), x, "")
	return s.view(y), nil
}

// endSession ends a running session at now (or at its expiry, if that came
// first), fixes its charge, and removes its machine. When the removal fails
// the session stays stopping and the reaper retries it.
func (s *Service) endSession(ctx context.Context, x store.Session, reason string) store.Session {
	now := s.clk.Now()
	end := now
	if end.After(x.ExpiresAt) {
		end = x.ExpiresAt
	}
	charged := int((end.Sub(x.CreatedAt) + time.Second - 1) / time.Second)
	y := x
	y.State = store.StateStopping
	y.EndedAt = end
	y.ChargedSeconds = min(max(charged, 0), x.ReservedSeconds)
	// The reaper retries only if this cleanup fails to record its end.
	y.NextCleanupAt = now.Add(reapClaim)
	y.LastError = reason
	if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
		s.log.Warn("end session", "session", x.ID, "err", err)
		if cur, gerr := s.st.GetSession(ctx, x.ID); gerr == nil {
			return cur
		}
		return x
	}
	s.terms.end(x.ID, endWhy(x, now, reason))
	s.hosted.drop(x.ID)
	// The instance that ended the session does its cleanup: another takes
	// it over only once this one is dead (see resumeCleanups), even when
	// the session's last claim was a dead instance's.
	if x.Owner != s.instance {
		if _, err := s.st.TakeSession(ctx, x.ID, x.Owner, s.instance, now.Add(reapClaim)); err != nil {
			s.log.Warn("take over the session's cleanup", "session", x.ID, "err", err)
		}
	}
	return s.cleanup(ctx, y)
}

// finalState is the state a stopping session ends in once its machine is gone.
func finalState(x store.Session) string {
	if !x.EndedAt.Before(x.ExpiresAt) {
		return store.StateExpired
	}
	return store.StateStopped
}

// cleanup destroys the machine of a stopping or cleanup_failed session.
func (s *Service) cleanup(ctx context.Context, x store.Session) store.Session {
	if x.Home == store.HomeLive && x.MachineID != "" {
		var ok bool
		if x, ok = s.archiveAtEnd(ctx, x); !ok {
			return x
		}
	}
	if y, ok := s.suspendAtEnd(ctx, x); ok {
		return y
	}
	var err error
	if x.MachineID != "" {
		var p providers.Provider
		if p, err = s.provider(x.Provider); err == nil {
			dctx, cancel := context.WithTimeout(s.withCredentials(ctx, x.AgentID), 2*time.Minute)
			err = p.Destroy(dctx, x.MachineID)
			cancel()
			if errors.Is(err, providers.ErrNotFound) {
				err = nil
			}
		}
	}
	y := x
	if err == nil {
		s.pool.forget(ctx, x)
		y.State = finalState(x)
		y.NextCleanupAt = time.Time{}
		if uerr := s.st.UpdateSession(ctx, y, x.State); uerr != nil {
			s.log.Warn("finish cleanup", "session", x.ID, "err", uerr)
		} else {
			s.log.Info("session ended", "session", x.ID, "agent", x.AgentID, "state", y.State, "charged", y.ChargedSeconds)
		}
		return y
	}
	y.CleanupTries++
	y.LastError = "destroy: " + err.Error()
	y.NextCleanupAt = s.clk.Now().Add(backoff(y.CleanupTries))
	if y.CleanupTries >= CleanupFailedAfter {
		y.State = store.StateCleanupFailed
	}
	if uerr := s.st.UpdateSession(ctx, y, x.State); uerr != nil {
		s.log.Warn("record cleanup failure", "session", x.ID, "err", uerr)
	}
	s.log.Warn("cleanup failed; will retry", "session", x.ID, "tries", y.CleanupTries, "next", y.NextCleanupAt, "err", err)
	return y
}

// backoff is the jittered wait before cleanup try n+1.
func backoff(n int) time.Duration {
	d := cleanupBase << min(n-1, 20)
	limit := cleanupMax
	if n >= CleanupFailedAfter {
		limit = cleanupFailedMax
	}
	d = min(d, limit)
	// Jitter: 75% to 125%.
	return d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// ConfirmRequest is the body of POST .../computer/confirm-cleanup.
type ConfirmRequest struct {
	ProviderCleanupConfirmed *bool `json:"providerCleanupConfirmed"`
}

// ConfirmCleanup closes an uncertain session, or one whose cleanup keeps
// failing, once a person has removed its machine at the provider.
func (s *Service) ConfirmCleanup(ctx context.Context, agent string, r ConfirmRequest) (SessionView, error) {
	if r.ProviderCleanupConfirmed == nil || !*r.ProviderCleanupConfirmed {
		return SessionView{}, badRequest("providerCleanupConfirmed: must be true, after you removed any machine of the session at the provider")
	}
	if _, err := s.connection(ctx, agent); err != nil {
		return SessionView{}, err
	}
	open, err := s.st.SessionsByState(ctx, store.StateUncertain, store.StateCleanupFailed, store.StateStopping)
	if err != nil {
		return SessionView{}, err
	}
	for _, x := range open {
		if x.AgentID != agent {
			continue
		}
		y := x
		now := s.clk.Now()
		if x.State == store.StateUncertain {
			end := now
			if end.After(x.ExpiresAt) {
				end = x.ExpiresAt
			}
			y.EndedAt = end
			y.ChargedSeconds = min(max(int(end.Sub(x.CreatedAt)/time.Second), 0), x.ReservedSeconds)
			y.State = store.StateStopped
		} else {
			y.State = finalState(x)
		}
		y.NextCleanupAt = time.Time{}
		y.LastError = "cleanup confirmed by a person"
		if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
			return SessionView{}, err
		}
		s.log.Info("cleanup confirmed", "session", x.ID, "agent", agent, "was", x.State)
		return s.view(y), nil
	}
	return SessionView{}, errorf(http.StatusConflict, CodeNoSession, "agent %q has no uncertain session or pending cleanup", agent)
}

// Reap beats this instance's heartbeat, ends expired sessions, retries due
// cleanups, resolves starts whose supervisor died, and purges old call
// records. Each session is claimed first, so that supervisors sharing a
// store never act on one session twice.
func (s *Service) Reap(ctx context.Context) {
	s.reapMu.Lock()
	defer s.reapMu.Unlock()
	now := s.clk.Now()
	s.beat(ctx, now)
	due, err := s.st.SessionsDue(ctx, now, 100)
	if err != nil {
		s.log.Warn("reaper: list due sessions", "err", err)
		return
	}
	for _, x := range due {
		if ctx.Err() != nil {
			return
		}
		if !s.claim(ctx, x, reapClaim) {
			continue
		}
		// Re-read: the claim may have been won after another finished it.
		if x, err = s.st.GetSession(ctx, x.ID); err != nil {
			continue
		}
		switch x.State {
		case store.StateRunning:
			now := s.clk.Now()
			switch {
			case !now.Before(x.ExpiresAt):
				s.log.Info("session expired", "session", x.ID, "agent", x.AgentID)
				s.endSession(ctx, x, "")
			case !x.SleepAt.IsZero() && !now.Before(x.SleepAt):
				s.log.Info("session idle; sleeping", "session", x.ID, "agent", x.AgentID, "since", x.SleepAt)
				s.endSession(ctx, x, "")
			}
		case store.StateStopping, store.StateCleanupFailed:
			s.cleanup(ctx, x)
		}
	}
	// One listing for both: starts and cleanups whose supervisor died.
	if open, err := s.st.SessionsByState(ctx, store.StateStarting, store.StateStopping); err != nil {
		s.log.Warn("reaper: list starting and stopping sessions", "err", err)
	} else {
		s.resolveOrphans(ctx, open)
		s.resumeCleanups(ctx, open)
	}
	// Records live a day: deleting the expired ones once a minute is enough.
	// A lapsed viewer seat counts for nothing, and taking a seat drops its
	// desktop's lapsed ones; the purge clears those of desktops nobody
	// watches any more.
	if now.Sub(s.lastPurge) >= purgeEvery {
		s.lastPurge = now
		if n, err := s.st.PurgeCalls(ctx, now.Add(-store.CallTTL)); err == nil && n > 0 {
			s.log.Debug("purged call records", "n", n)
		}
		s.forgetTouches(now)
		s.forgetPreviews(now)
		if n, err := s.st.PurgeSeats(ctx, now); err != nil {
			s.log.Warn("purge viewer seats", "err", err)
		} else if n > 0 {
			s.log.Debug("purged viewer seats", "n", n)
		}
		if n, err := s.st.PurgeDesktopSeats(ctx, now); err != nil {
			s.log.Warn("purge desktop seats", "err", err)
		} else if n > 0 {
			s.log.Debug("purged desktop seats", "n", n)
		}
	}
	if now.Sub(s.lastSweep) >= sweepEvery {
		s.lastSweep = now
		s.sweepArchives(ctx)
	}
}

// claim takes a session for d; it is false while another instance holds it.
func (s *Service) claim(ctx context.Context, x store.Session, d time.Duration) bool {
	now := s.clk.Now()
	ok, err := s.st.ClaimSession(ctx, x.ID, s.instance, now, now.Add(d))
	if err != nil {
		s.log.Warn("claim session", "session", x.ID, "err", err)
	}
	return ok && err == nil
}

// resumeCleanups takes over at once the cleanups of stopping sessions
// whose supervisor died, rather than when their next try was due: a
// persistent computer's archive is then made while its machine is still
// there, and no machine outlives its session by more than a reaper pass.
// open holds the sessions to look at; only the stopping ones are.
func (s *Service) resumeCleanups(ctx context.Context, open []store.Session) {
	now := s.clk.Now()
	for _, x := range open {
		if x.State != store.StateStopping || x.Owner == s.instance || x.Owner == "" || !now.Before(x.NextCleanupAt) || ctx.Err() != nil {
			continue // ours, or due anyway
		}
		alive, err := s.st.InstanceAlive(ctx, x.Owner, now.Add(-InstanceTTL))
		if err != nil || alive {
			continue
		}
		if ok, err := s.st.TakeSession(ctx, x.ID, x.Owner, s.instance, now.Add(reapClaim)); err != nil || !ok {
			continue
		}
		if x, err = s.st.GetSession(ctx, x.ID); err != nil || x.State != store.StateStopping {
			continue
		}
		s.log.Info("resuming the cleanup of a session whose supervisor died", "session", x.ID, "agent", x.AgentID)
		s.cleanup(ctx, x)
	}
}

// resolveOrphans settles starting sessions whose supervisor died mid-create:
// a machine found by the attempt label is adopted; otherwise the session is
// uncertain, and no other machine is created until a person confirms.
// open holds the sessions to look at; only the starting ones are.
func (s *Service) resolveOrphans(ctx context.Context, open []store.Session) {
	now := s.clk.Now()
	var listed map[string][]providers.Machine // by provider
	for _, x := range open {
		if x.State != store.StateStarting {
			continue
		}
		if x.Owner == s.instance && now.Before(x.ClaimUntil) {
			continue // our own start, still running
		}
		claimed := false
		if x.Owner != s.instance {
			alive, err := s.st.InstanceAlive(ctx, x.Owner, now.Add(-InstanceTTL))
			if err != nil || (alive && now.Before(x.ClaimUntil)) {
				continue
			}
			if !alive {
				// Its supervisor died: take the claim over from it.
				claimed, err = s.st.TakeSession(ctx, x.ID, x.Owner, s.instance, now.Add(reapClaim))
				if err != nil || !claimed {
					continue
				}
			}
		}
		if !claimed && !s.claim(ctx, x, reapClaim) {
			continue
		}
		if listed == nil {
			listed = map[string][]providers.Machine{}
		}
		// Listed with the session's own credentials: hosted providers
		// list one account at a time.
		key := x.Provider + "\x00" + x.AgentID
		ms, ok := listed[key]
		if !ok {
			ms, _ = s.listMachines(s.withCredentials(ctx, x.AgentID), x.Provider)
			listed[key] = ms
		}
		s.resolveStart(ctx, x, ms)
	}
}

// resolveStart adopts the machine of a lost start or marks it uncertain.
func (s *Service) resolveStart(ctx context.Context, x store.Session, ms []providers.Machine) {
	log := s.log.With("session", x.ID, "agent", x.AgentID, "attempt", x.AttemptID)
	for _, m := range ms {
		if m.Labels[providers.LabelAttempt] != x.AttemptID {
			continue
		}
		if m.Endpoint == "" || m.Labels[providers.LabelPool] == "true" {
			// Only parts of the machine exist (say, its network), or it is
			// a pool computer whose bind secret died with its supervisor:
			// nothing to adopt. Record it so the cleanup removes it.
			x.MachineID = m.ID
			s.endSession(ctx, x, "the start was cut short; removing what it made")
			return
		}
		if err := s.adopt(ctx, &x, m); err != nil {
			log.Warn("adopt orphaned start", "err", err)
			return
		}
		log.Info("adopted the machine of a start whose supervisor died", "machine", m.ID)
		return
	}
	y := x
	y.State = store.StateUncertain
	y.LastError = "the supervisor running this start stopped before the provider's reply was recorded"
	if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
		log.Warn("mark orphaned start uncertain", "err", err)
		return
	}
	log.Warn("orphaned start is uncertain: no machine carries its attempt label")
}

// listMachines lists a provider's machines of this deployment; providers
// that cannot list answer nothing.
func (s *Service) listMachines(ctx context.Context, provider string) ([]providers.Machine, error) {
	p, ok := s.cfg.Providers[provider]
	if !ok {
		return nil, fmt.Errorf("provider %q not configured", provider)
	}
	l, ok := p.(providers.Lister)
	if !ok {
		return nil, nil
	}
	dep, err := s.Deployment(ctx)
	if err != nil {
		return nil, err
	}
	all, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []providers.Machine
	for _, m := range all {
		if m.Labels[providers.LabelDeployment] == dep {
			out = append(out, m)
		}
	}
	return out, nil
}

// beat records that this instance is alive at now.
func (s *Service) beat(ctx context.Context, now time.Time) {
	if err := s.st.Heartbeat(ctx, s.instance, now); err != nil && ctx.Err() == nil {
		s.log.Warn("heartbeat", "err", err)
	}
}

// beatEvery is how often RunReaper beats this instance's heartbeat, well
// within InstanceTTL.
const beatEvery = InstanceTTL / 4

// RunReaper reaps every interval until ctx ends. The heartbeat that tells
// other supervisors this one is alive beats on its own every beatEvery, so
// that a reaper pass held up by slow destroys (an engine under load) does
// not make this instance look dead and its cleanups taken over and done
// twice.
func (s *Service) RunReaper(ctx context.Context, interval time.Duration) {
	beating := make(chan struct{})
	defer func() { <-beating }()
	go func() {
		defer close(beating)
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.clk.After(beatEvery):
			}
			s.beat(ctx, s.clk.Now())
		}
	}()
	for {
		s.Reap(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.clk.After(interval):
		}
	}
}
