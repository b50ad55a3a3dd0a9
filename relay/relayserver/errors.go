package relayserver

import (
	"errors"
	"fmt"
	"time"
)

// ErrLenderOffline is returned when a lender's agent has no live connection
// to this relay. The error returned wraps it in an [*OfflineError] that carries the
// agent's last-seen time.
var ErrLenderOffline = errors.New("agent offline")

// ErrClosed is returned by a server that has been closed.
var ErrClosed = errors.New("relay closed")

// OfflineError reports a lender whose agent is not connected, with when it was
// last seen (zero if never).
type OfflineError struct {
	LenderID string
	LastSeen time.Time
}

func (e *OfflineError) Error() string {
	if e.LastSeen.IsZero() {
		return fmt.Sprintf("agent %s offline: never seen", e.LenderID)
	}
	return fmt.Sprintf("agent %s offline: last seen %s", e.LenderID, e.LastSeen.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrLenderOffline) true.
func (e *OfflineError) Unwrap() error { return ErrLenderOffline }
