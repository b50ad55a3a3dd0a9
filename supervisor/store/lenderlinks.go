package store

import (
	"context"
	"time"
)

// LenderLink records which relay holds a lender's link. With several
// relays (RELAY_URL=lookup), each relay reports the lenders it holds, and
// the supervisor sends a lender's requests to the relay its row names.
// A row is a lease: the relay renews it with every report, and a relay
// that stops reporting loses its lenders when their leases run out.
type LenderLink struct {
	LenderID    string
	Relay       string    // the relay's internal API, such as http://10.0.0.5:8081
	ConnectedAt time.Time // when the lender's link to that relay began
	LastSeen    time.Time // the relay's last word from the lender
	Version     string    // the lending agent's version
	Expires     time.Time // the lease's end; the link is offline from then on
}

// Online reports whether the link's lease holds at now.
func (l LenderLink) Online(now time.Time) bool { return now.Before(l.Expires) }

// LenderLinks keeps the lenders' links, shared by every supervisor and
// relay on the store. Every Store implements it.
type LenderLinks interface {
	// PutLenderLink records that l.Relay holds the lender's link until
	// l.Expires. A row naming another relay is replaced only when its
	// lease has run out at now or its link began no later than l's (the
	// newer link wins). It reports whether l was written.
	PutLenderLink(ctx context.Context, l LenderLink, now time.Time) (bool, error)
	// EndLenderLink marks the lender's link on relay ended at t (its lease
	// ends then, its last-seen time is t) when the row still names relay.
	EndLenderLink(ctx context.Context, lenderID, relay string, t time.Time) error
	// GetLenderLink returns the lender's row, or ErrNotFound.
	GetLenderLink(ctx context.Context, lenderID string) (LenderLink, error)
	// LenderLinks lists every row, sorted by lender id.
	LenderLinks(ctx context.Context) ([]LenderLink, error)
}
