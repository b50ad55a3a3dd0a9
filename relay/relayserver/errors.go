package relayserver

import (
	"errors"
	"fmt"
	"time"
)

// ErrAgentOffline is returned when an agent has no live connection to this
// relay. The error returned wraps it in an [*OfflineError] that carries the
// agent's last-seen time.
var ErrAgentOffline = errors.New("agent offline")

// ErrClosed is returned by a server that has been closed.
var ErrClosed = errors.New("relay closed")

// OfflineError reports an agent that is not connected, with when it was
// last seen (zero if never).
type OfflineError struct {
	AgentID  string
	LastSeen time.Time
}

func (e *OfflineError) Error() string {
	if e.LastSeen.IsZero() {
		return fmt.Sprintf("agent %s offline: never seen", e.AgentID)
	}
	return fmt.Sprintf("agent %s offline: last seen %s", e.AgentID, e.LastSeen.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrAgentOffline) true.
func (e *OfflineError) Unwrap() error { return ErrAgentOffline }
