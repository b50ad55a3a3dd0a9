package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/supervisor/store"
)

// LendingProvider is a provider whose computers run on lenders' machines
// (the local provider): it names the lender of a machine and drops a
// lender's relay link.
type LendingProvider interface {
	// LenderOf returns the lender whose machine machineID is.
	LenderOf(machineID string) (lenderID string, ok bool)
	// DropLender closes the lender's relay link, if it has one.
	DropLender(ctx context.Context, lenderID string) error
	// LenderState asks an online lender for its state, with its owner's
	// limits; the answer is size-limited and has a deadline.
	LenderState(ctx context.Context, lenderID string) (lending.State, error)
}

// CompanionView is a paired lender as the API shows it.
type CompanionView = api.Companion

// Companions lists the paired lenders; online says whether the relay sees
// one linked (nil: unknown, every companion is shown offline).
func (s *Service) Companions(ctx context.Context, online func(id string) bool) ([]CompanionView, error) {
	cs, err := s.st.Companions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CompanionView, 0, len(cs))
	for _, c := range cs {
		v := CompanionView{ID: c.ID, Name: c.Name, CreatedAt: c.CreatedAt, LastSeenAt: c.LastSeenAt}
		if online != nil {
			v.Online = online(c.ID)
		}
		out = append(out, v)
	}
	return out, nil
}

// RevokeCompanion unpairs a lender at once: its token is refused from now
// on, the live sessions on its machine are ended (their computers removed
// through the link while it is still up; a failed removal is retried as
// for any session), then its relay link is dropped. It returns how many
// sessions it ended.
func (s *Service) RevokeCompanion(ctx context.Context, id string) (int, error) {
	if err := s.st.DeleteCompanion(ctx, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, errorf(http.StatusNotFound, CodeNotFound, "companion %q does not exist", id)
		}
		return 0, fmt.Errorf("revoke companion %s: %w", id, err)
	}
	s.log.Info("companion revoked", "companion", id)
	s.Record(ctx, "companion.revoke", "", id, "")
	ctx = context.WithoutCancel(ctx)
	live, err := s.st.SessionsByState(ctx, store.StateStarting, store.StateRunning)
	if err != nil {
		return 0, err
	}
	ended := 0
	for _, x := range live {
		lp, ok := s.cfg.Providers[x.Provider].(LendingProvider)
		if !ok || x.MachineID == "" {
			continue
		}
		if lid, ok := lp.LenderOf(x.MachineID); !ok || lid != id {
			continue
		}
		if x.State == store.StateStarting {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			x, err = s.awaitStarting(wctx, x)
			cancel()
			if err != nil || x.State != store.StateRunning {
				continue
			}
		}
		s.endSession(ctx, x, "the lender was unpaired")
		ended++
	}
	for name, p := range s.cfg.Providers {
		if lp, ok := p.(LendingProvider); ok {
			if err := lp.DropLender(ctx, id); err != nil {
				s.log.Warn("drop lender link", "provider", name, "companion", id, "err", err)
			}
		}
	}
	return ended, nil
}
