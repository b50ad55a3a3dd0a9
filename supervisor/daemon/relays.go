package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor/store"
)

// Several relays: each relay reports the lenders it holds
// (relayserver.ReportPath), the supervisor records them in its store with
// a lease, and with RELAY_URL=lookup the providers for lent machines reach
// each lender through the relay its row names. Every supervisor on the
// store sees every relay's lenders.

// relayLinks reads lenders' links from the daemon's store; it is the
// lookup of the relay router, made before the store opens.
type relayLinks struct{ d *Daemon }

func (r relayLinks) Link(ctx context.Context, lenderID string) (relayserver.Link, bool, error) {
	l, err := r.d.Store.GetLenderLink(ctx, lenderID)
	if errors.Is(err, store.ErrNotFound) {
		return relayserver.Link{}, false, nil
	}
	if err != nil {
		return relayserver.Link{}, false, err
	}
	return linkOf(l, time.Now()), true, nil
}

func (r relayLinks) Links(ctx context.Context) ([]relayserver.Link, error) {
	ls, err := r.d.Store.LenderLinks(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]relayserver.Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, linkOf(l, now))
	}
	return out, nil
}

func linkOf(l store.LenderLink, now time.Time) relayserver.Link {
	p := relayserver.Presence{LenderID: l.LenderID, Online: l.Online(now), ConnectedAt: l.ConnectedAt, LastSeen: l.LastSeen, Version: l.Version}
	return relayserver.Link{Relay: l.Relay, Presence: p}
}

// recordRelayReport writes a relay's report: its online lenders hold a
// lease for the report's time, and an offline one ends the link it had
// there. A lender that moved to another relay keeps its newer row.
func (d *Daemon) recordRelayReport(ctx context.Context, rep relayserver.Report) error {
	now := time.Now()
	lease := time.Duration(rep.LeaseSeconds) * time.Second
	for _, p := range rep.Lenders {
		if !p.Online {
			if err := d.Store.EndLenderLink(ctx, p.LenderID, rep.Relay, p.LastSeen); err != nil {
				return err
			}
			continue
		}
		l := store.LenderLink{LenderID: p.LenderID, Relay: rep.Relay, ConnectedAt: p.ConnectedAt, LastSeen: p.LastSeen, Version: p.Version, Expires: now.Add(lease)}
		if _, err := d.Store.PutLenderLink(ctx, l, now); err != nil {
			return err
		}
	}
	return nil
}
