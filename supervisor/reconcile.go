package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

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

// Reconcile matches every machine the providers list with this
// deployment's labels to a session: a machine of a live session is kept
// (or adopted when the session lost it), a machine of an ended or unknown
// session is destroyed, and a running session whose machine is gone is
// ended. It runs at start, after a crash or restart; the providers it
// could not finish are in the report's Unfinished, for RetryReconcile.
func (s *Service) Reconcile(ctx context.Context) (ReconcileReport, error) {
	return s.reconcile(ctx, slices.Sorted(maps.Keys(s.cfg.Providers)))
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

// RetryReconcile reconciles the providers named in unfinished again, with
// a growing wait between passes, until every one of them has finished a
// pass or ctx ends. A provider that was unreachable at start (a lender not
// yet connected, a hosted API that answered 503) is matched once it
// answers, so that its leftovers are removed then and not at the next
// restart.
func (s *Service) RetryReconcile(ctx context.Context, unfinished []string) {
	failures := map[string]int{}
	for _, id := range unfinished {
		failures[id] = 1
	}
	wait := reconcileRetryFirst
	for len(unfinished) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-s.clk.After(wait):
		}
		rep, err := s.reconcile(ctx, unfinished)
		if ctx.Err() != nil {
			return
		}
		wait = min(2*wait, reconcileRetryMax)
		for _, id := range rep.Unfinished {
			failures[id]++
			if failures[id] == reconcileWarnAfter {
				s.log.Warn("reconcile: a provider keeps failing; still trying", "provider", id, "passes", failures[id], "err", err)
			}
		}
		if len(rep.Unfinished) > 0 {
			s.log.Info("reconcile: trying again", "providers", rep.Unfinished, "in", wait, "err", err)
		}
		unfinished = rep.Unfinished
	}
}

// reconcile runs one pass over the providers named in ids.
func (s *Service) reconcile(ctx context.Context, ids []string) (ReconcileReport, error) {
	var rep ReconcileReport
	// Sessions first: a machine created after this read belongs to a start
	// in progress and is left alone.
	running, err := s.st.SessionsByState(ctx, store.StateRunning)
	if err != nil {
		return ReconcileReport{Unfinished: ids}, err
	}
	var errs []error
	for _, id := range ids {
		p, ok := s.cfg.Providers[id]
		if !ok {
			continue
		}
		if _, ok := p.(providers.Lister); !ok {
			continue
		}
		pr, err := s.reconcileProvider(ctx, id, p, running)
		rep.add(pr)
		if err != nil {
			rep.Unfinished = append(rep.Unfinished, id)
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	s.log.Info("reconciled", "machines", rep.Machines, "kept", rep.Kept, "adopted", rep.Adopted, "destroyed", rep.Destroyed, "vanished", rep.Vanished, "pooled", rep.Pooled, "unfinished", len(rep.Unfinished))
	return rep, errors.Join(errs...)
}

// reconcileProvider is one provider's part of a pass. Running sessions
// whose machine is missing are ended only when every account's list was
// read.
func (s *Service) reconcileProvider(ctx context.Context, id string, p providers.Provider, running []store.Session) (ReconcileReport, error) {
	var rep ReconcileReport
	var errs []error
	// Each account in use is listed with its own credentials.
	seen := map[string]bool{}
	listed := true
	for _, cctx := range s.credentialSets(ctx, id) {
		ms, err := s.listMachines(cctx, id)
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
			if err := s.reconcileMachine(cctx, p, id, m, &rep); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if !listed {
		return rep, errors.Join(errs...) // a session's machine may be in the account that failed
	}
	for _, x := range running {
		if x.Provider != id || seen[x.MachineID] || !s.claim(ctx, x, reapClaim) {
			continue
		}
		s.log.Warn("reconcile: the machine of a running session is gone; ending it", "session", x.ID, "machine", x.MachineID)
		s.endSession(ctx, x, "machine gone")
		rep.Vanished++
	}
	return rep, errors.Join(errs...)
}

// reconcileMachine settles one listed machine. Its error means the
// machine may still need settling: a read of the store or a leftover's
// removal failed.
func (s *Service) reconcileMachine(ctx context.Context, p providers.Provider, provider string, m providers.Machine, rep *ReconcileReport) error {
	log := s.log.With("machine", m.ID, "provider", provider)
	sessionID := m.Labels[providers.LabelSession]
	if m.Labels[providers.LabelPool] == "true" {
		// Its labels cannot say which session claimed it: the store does.
		pm, err := s.st.GetPoolMember(ctx, m.Labels[providers.LabelComputer])
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("machine %s: read pool member: %w", m.ID, err)
		case err == nil && pm.State == store.PoolClaimed:
			sessionID = pm.SessionID
		case err == nil:
			alive := pm.Owner == s.instance
			if !alive {
				alive, err = s.st.InstanceAlive(ctx, pm.Owner, s.clk.Now().Add(-InstanceTTL))
				if err != nil {
					return fmt.Errorf("machine %s: %w", m.ID, err)
				}
			}
			if alive {
				rep.Pooled++
				return nil
			}
			// Its supervisor is gone, and its bind secret with it.
			s.st.DeletePoolMember(ctx, pm.ComputerID, pm.State)
		}
	}
	x, err := s.st.GetSession(ctx, sessionID)
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
		if !s.claim(ctx, x, reapClaim) {
			return nil // another supervisor acts on it
		}
		if m.Endpoint == "" {
			break // parts only: a leftover
		}
		if err := s.adopt(ctx, &x, m); err != nil {
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
		s.st.DeletePoolMember(ctx, m.Labels[providers.LabelComputer], "")
	}
	log.Info("reconcile: destroyed a leftover machine", "session", m.Labels[providers.LabelSession])
	rep.Destroyed++
	return nil
}
