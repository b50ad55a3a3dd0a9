package supervisor

import (
	"context"
	"errors"

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
}

// Reconcile matches every machine the providers list with this
// deployment's labels to a session: a machine of a live session is kept
// (or adopted when the session lost it), a machine of an ended or unknown
// session is destroyed, and a running session whose machine is gone is
// ended. It runs at start, after a crash or restart.
func (s *Service) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	// Sessions first: a machine created after this read belongs to a start
	// in progress and is left alone.
	running, err := s.st.SessionsByState(ctx, store.StateRunning)
	if err != nil {
		return rep, err
	}
	var errs []error
	for id, p := range s.cfg.Providers {
		if _, ok := p.(providers.Lister); !ok {
			continue
		}
		// Each account in use is listed with its own credentials.
		seen := map[string]bool{}
		failed := false
		for _, cctx := range s.credentialSets(ctx, id) {
			ms, err := s.listMachines(cctx, id)
			if err != nil {
				errs = append(errs, err)
				failed = true
				continue
			}
			for _, m := range ms {
				if seen[m.ID] {
					continue
				}
				seen[m.ID] = true
				rep.Machines++
				s.reconcileMachine(cctx, p, id, m, &rep)
			}
		}
		if failed {
			continue // a session's machine may be in the account that failed
		}
		for _, x := range running {
			if x.Provider != id || seen[x.MachineID] || !s.claim(ctx, x, reapClaim) {
				continue
			}
			s.log.Warn("reconcile: the machine of a running session is gone; ending it", "session", x.ID, "machine", x.MachineID)
			s.endSession(ctx, x, "machine gone")
			rep.Vanished++
		}
	}
	s.log.Info("reconciled", "machines", rep.Machines, "kept", rep.Kept, "adopted", rep.Adopted, "destroyed", rep.Destroyed, "vanished", rep.Vanished, "pooled", rep.Pooled)
	return rep, errors.Join(errs...)
}

func (s *Service) reconcileMachine(ctx context.Context, p providers.Provider, provider string, m providers.Machine, rep *ReconcileReport) {
	log := s.log.With("machine", m.ID, "provider", provider)
	sessionID := m.Labels[providers.LabelSession]
	if m.Labels[providers.LabelPool] == "true" {
		// Its labels cannot say which session claimed it: the store does.
		pm, err := s.st.GetPoolMember(ctx, m.Labels[providers.LabelComputer])
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			log.Warn("reconcile: read pool member", "err", err)
			return
		case err == nil && pm.State == store.PoolClaimed:
			sessionID = pm.SessionID
		case err == nil:
			alive := pm.Owner == s.instance
			if !alive {
				alive, err = s.st.InstanceAlive(ctx, pm.Owner, s.clk.Now().Add(-InstanceTTL))
				if err != nil {
					return
				}
			}
			if alive {
				rep.Pooled++
				return
			}
			// Its supervisor is gone, and its bind secret with it.
			s.st.DeletePoolMember(ctx, pm.ComputerID, pm.State)
		}
	}
	x, err := s.st.GetSession(ctx, sessionID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		log.Warn("reconcile: read session", "err", err)
		return
	}
	switch {
	case err == nil && x.State == store.StateRunning && x.MachineID == m.ID:
		rep.Kept++
		return
	case err == nil && x.State == store.StateStarting:
		// A start in progress, or one whose supervisor died: resolveOrphans
		// settles the latter once its claim runs out.
		rep.Kept++
		return
	case err == nil && x.State == store.StateUncertain && x.AttemptID == m.Labels[providers.LabelAttempt]:
		if !s.claim(ctx, x, reapClaim) {
			return
		}
		if m.Endpoint == "" {
			break // parts only: a leftover
		}
		if err := s.adopt(ctx, &x, m); err != nil {
			log.Warn("reconcile: adopt", "err", err)
			return
		}
		log.Info("reconcile: adopted the machine of an uncertain session", "session", x.ID)
		rep.Adopted++
		return
	case err == nil && (x.State == store.StateStopping || x.State == store.StateCleanupFailed) && x.MachineID == m.ID:
		return // the reaper's cleanup owns it
	}
	// An ended session, an unknown one, or a machine that is not the
	// session's own: a leftover.
	if err := p.Destroy(ctx, m.ID); err != nil && !errors.Is(err, providers.ErrNotFound) {
		log.Warn("reconcile: destroy leftover", "err", err)
		return
	}
	if m.Labels[providers.LabelPool] == "true" {
		s.st.DeletePoolMember(ctx, m.Labels[providers.LabelComputer], "")
	}
	log.Info("reconcile: destroyed a leftover machine", "session", m.Labels[providers.LabelSession])
	rep.Destroyed++
}
