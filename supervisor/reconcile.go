package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// ReconcileReport says what a reconciliation found and did.
type ReconcileReport struct {
	Machines  int // machines of this deployment the providers list
	Kept      int // matched to a live session
	Adopted   int // bound to a session that had lost them
	Destroyed int // leftovers removed
	Vanished  int // running sessions whose machine was gone, ended
	Pooled    int // warm-pool computers waiting for a live supervisor, kept
	// Unfinished names the providers whose pass did not finish: a list
	// or a leftover's removal failed. RetryReconcile tries them again.
	Unfinished []string
}

func (r *ReconcileReport) add(o ReconcileReport) {
	r.Machines += o.Machines
	r.Kept += o.Kept
	r.Adopted += o.Adopted
	r.Destroyed += o.Destroyed
	r.Vanished += o.Vanished
	r.Pooled += o.Pooled
	r.Unfinished = append(r.Unfinished, o.Unfinished...)
}

// ReconcilerOptions are what a Reconciler needs.
type ReconcilerOptions struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Providers are the configured providers by id; those that are
	// providers.Listers are reconciled.
	Providers map[string]providers.Provider
	// Instance is this supervisor's instance id.
	Instance string
	// Machines lists a provider's machines of this deployment.
	Machines func(ctx context.Context, provider string) ([]providers.Machine, error)
	// Accounts returns one context per set of credentials in use with a
	// provider, so that every account is listed.
	Accounts func(ctx context.Context, provider string) []context.Context
	// Claim takes a session for d; it is false while another instance
	// holds it.
	Claim func(ctx context.Context, x store.Session, d time.Duration) bool
	// End ends a running session and removes its machine.
	End func(ctx context.Context, x store.Session, reason string) store.Session
	// Adopt binds machine m to the uncertain session x and waits for it.
	Adopt func(ctx context.Context, x *store.Session, m providers.Machine) error
}

// Reconciler matches the machines the providers list to the sessions in
// the store, after a crash or a restart.
type Reconciler struct {
	st        store.Store
	clk       clock.Clock
	log       *slog.Logger
	providers map[string]providers.Provider
	instance  string
	machines  func(ctx context.Context, provider string) ([]providers.Machine, error)
	accounts  func(ctx context.Context, provider string) []context.Context
	claim     func(ctx context.Context, x store.Session, d time.Duration) bool
	end       func(ctx context.Context, x store.Session, reason string) store.Session
	adopt     func(ctx context.Context, x *store.Session, m providers.Machine) error
}

// NewReconciler returns the reconciler of opts.
func NewReconciler(opts ReconcilerOptions) *Reconciler {
	return &Reconciler{
		st: opts.Store, clk: opts.Clock, log: opts.Logger, providers: opts.Providers, instance: opts.Instance,
		machines: opts.Machines, accounts: opts.Accounts, claim: opts.Claim, end: opts.End, adopt: opts.Adopt,
	}
}

// Reconcile matches every machine the providers list with this
// deployment's labels to a session: a machine of a live session is kept
// (or adopted when the session lost it), a machine of an ended or unknown
// session is destroyed, and a running session whose machine is gone is
// ended. It runs at start, after a crash or restart; the providers it
// could not finish are in the report's Unfinished, for RetryReconcile.
func (r *Reconciler) Reconcile(ctx context.Context) (ReconcileReport, error) {
	return r.reconcile(ctx, slices.Sorted(maps.Keys(r.providers)))
}

// Reconcile retries: the first comes reconcileRetryFirst after the pass
// that failed, and each wait doubles up to reconcileRetryMax. A provider
// that has failed reconcileWarnAfter passes in a row is logged as a
// warning, once.
const (
	reconcileRetryFirst = 2 * time.Second
	reconcileRetryMax   = 5 * time.Minute
	reconcileWarnAfter  = 5
)

// Retry reconciles the providers named in unfinished again, with
// a growing wait between passes, until every one of them has finished a
// pass or ctx ends. A provider that was unreachable at start (a lender not
// yet connected, a hosted API that answered 503) is matched once it
// answers, so that its leftovers are removed then and not at the next
// restart.
func (r *Reconciler) Retry(ctx context.Context, unfinished []string) {
	failures := map[string]int{}
	for _, id := range unfinished {
		failures[id] = 1
	}
	wait := reconcileRetryFirst
	for len(unfinished) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-r.clk.After(wait):
		}
		rep, err := r.reconcile(ctx, unfinished)
		if ctx.Err() != nil {
			return
		}
		wait = min(2*wait, reconcileRetryMax)
		for _, id := range rep.Unfinished {
			failures[id]++
			if failures[id] == reconcileWarnAfter {
				r.log.Warn("reconcile: a provider keeps failing; still trying", "provider", id, "passes", failures[id], "err", err)
			}
		}
		if len(rep.Unfinished) > 0 {
			r.log.Info("reconcile: trying again", "providers", rep.Unfinished, "in", wait, "err", err)
		}
		unfinished = rep.Unfinished
	}
}

// reconcile runs one pass over the providers named in ids.
func (r *Reconciler) reconcile(ctx context.Context, ids []string) (ReconcileReport, error) {
	var rep ReconcileReport
	// Sessions first: a machine created after this read belongs to a start
	// in progress and is left alone.
	running, err := r.st.SessionsByState(ctx, store.StateRunning)
	if err != nil {
		return ReconcileReport{Unfinished: ids}, err
	}
	suspended, err := r.st.SuspendedSessions(ctx)
	if err != nil {
		return ReconcileReport{Unfinished: ids}, err
	}
	var errs []error
	for _, id := range ids {
		p, ok := r.providers[id]
		if !ok {
			continue
		}
		if _, ok := p.(providers.Lister); !ok {
			continue
		}
		pr, err := r.reconcileProvider(ctx, id, p, running, suspended)
		rep.add(pr)
		if err != nil {
			rep.Unfinished = append(rep.Unfinished, id)
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	r.log.Info("reconciled", "machines", rep.Machines, "kept", rep.Kept, "adopted", rep.Adopted, "destroyed", rep.Destroyed, "vanished", rep.Vanished, "pooled", rep.Pooled, "unfinished", len(rep.Unfinished))
	return rep, errors.Join(errs...)
}

// reconcileProvider is one provider's part of a pass. Running sessions
// whose machine is missing are ended only when every account's list was
// read.
func (r *Reconciler) reconcileProvider(ctx context.Context, id string, p providers.Provider, running, suspended []store.Session) (ReconcileReport, error) {
	var rep ReconcileReport
	var errs []error
	// Each account in use is listed with its own credentials.
	seen := map[string]bool{}
	listed := true
	// A machine a running session uses is its own, whichever session made
	// it (a resumed machine carries the labels of the one that slept); a
	// suspended one is kept for the agent's next start.
	kept := map[string]bool{}
	for _, x := range slices.Concat(running, suspended) {
		if x.Provider == id && x.MachineID != "" {
			kept[x.MachineID] = true
		}
	}
	for _, cctx := range r.accounts(ctx, id) {
		ms, err := r.machines(cctx, id)
		if err != nil {
			errs = append(errs, err)
			listed = false
			continue
		}
		for _, m := range ms {
			if seen[m.ID] {
				continue
			}
			seen[m.ID] = true
			rep.Machines++
			if kept[m.ID] {
				rep.Kept++
				continue
			}
			if err := r.reconcileMachine(cctx, p, id, m, &rep); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if !listed {
		return rep, errors.Join(errs...) // a session's machine may be in the account that failed
	}
	for _, x := range running {
		if x.Provider != id || seen[x.MachineID] || !r.claim(ctx, x, reapClaim) {
			continue
		}
		r.log.Warn("reconcile: the machine of a running session is gone; ending it", "session", x.ID, "machine", x.MachineID)
		r.end(ctx, x, "machine gone")
		rep.Vanished++
	}
	return rep, errors.Join(errs...)
}

// reconcileMachine settles one listed machine. Its error means the
// machine may still need settling: a read of the store or a leftover's
// removal failed.
func (r *Reconciler) reconcileMachine(ctx context.Context, p providers.Provider, provider string, m providers.Machine, rep *ReconcileReport) error {
	log := r.log.With("machine", m.ID, "provider", provider)
	sessionID := m.Labels[providers.LabelSession]
	if m.Labels[providers.LabelPool] == "true" {
		// Its labels cannot say which session claimed it: the store does.
		pm, err := r.st.GetPoolMember(ctx, m.Labels[providers.LabelComputer])
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("machine %s: read pool member: %w", m.ID, err)
		case err == nil && pm.State == store.PoolClaimed:
			sessionID = pm.SessionID
		case err == nil:
			alive := pm.Owner == r.instance
			if !alive {
				alive, err = r.st.InstanceAlive(ctx, pm.Owner, r.clk.Now().Add(-InstanceTTL))
				if err != nil {
					return fmt.Errorf("machine %s: %w", m.ID, err)
				}
			}
			if alive {
				rep.Pooled++
				return nil
			}
			// Its supervisor is gone, and its bind secret with it.
			r.st.DeletePoolMember(ctx, pm.ComputerID, pm.State)
		}
	}
	x, err := r.st.GetSession(ctx, sessionID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("machine %s: read session: %w", m.ID, err)
	}
	switch {
	case err == nil && x.State == store.StateRunning && x.MachineID == m.ID:
		rep.Kept++
		return nil
	case err == nil && x.State == store.StateStarting:
		// A start in progress, or one whose supervisor died: resolveOrphans
		// settles the latter once its claim runs out.
		rep.Kept++
		return nil
	case err == nil && x.State == store.StateUncertain && x.AttemptID == m.Labels[providers.LabelAttempt]:
		if !r.claim(ctx, x, reapClaim) {
			return nil // another supervisor acts on it
		}
		if m.Endpoint == "" {
			break // parts only: a leftover
		}
		if err := r.adopt(ctx, &x, m); err != nil {
			return fmt.Errorf("machine %s: adopt: %w", m.ID, err)
		}
		log.Info("reconcile: adopted the machine of an uncertain session", "session", x.ID)
		rep.Adopted++
		return nil
	case err == nil && (x.State == store.StateStopping || x.State == store.StateCleanupFailed) && x.MachineID == m.ID:
		return nil // the reaper's cleanup owns it
	}
	// An ended session, an unknown one, or a machine that is not the
	// session's own: a leftover.
	if err := p.Destroy(ctx, m.ID); err != nil && !errors.Is(err, providers.ErrNotFound) {
		return fmt.Errorf("machine %s: destroy leftover: %w", m.ID, err)
	}
	if m.Labels[providers.LabelPool] == "true" {
		r.st.DeletePoolMember(ctx, m.Labels[providers.LabelComputer], "")
	}
	log.Info("reconcile: destroyed a leftover machine", "session", m.Labels[providers.LabelSession])
	rep.Destroyed++
	return nil
}

// Reconcile matches the providers' machines to sessions; see
// Reconciler.Reconcile.
func (s *Service) Reconcile(ctx context.Context) (ReconcileReport, error) {
	return s.reconciler.Reconcile(ctx)
}

// RetryReconcile reconciles the providers named in unfinished again until
// each has finished a pass or ctx ends; see Reconciler.Retry.
func (s *Service) RetryReconcile(ctx context.Context, unfinished []string) {
	s.reconciler.Retry(ctx, unfinished)
}
