package turnserver

import "errors"

// Errors of the package.
var (
	// ErrBadSecret is returned for an empty or short TURN_SECRET.
	ErrBadSecret = errors.New("TURN_SECRET must be at least 16 bytes")
	// ErrNoRelayIP is returned when no relay address is configured.
	ErrNoRelayIP = errors.New("turn: RelayIP is required")
	// ErrNoListeners is returned when no listener is given.
	ErrNoListeners = errors.New("turn: at least one packet conn or listener is required")
	// ErrBadTTL is returned for a credential lifetime outside 1 s..MaxTTL.
	ErrBadTTL = errors.New("turn: credential TTL must be between 1 s and 10 min")
	// ErrBadID is returned for a credential id that is empty or holds ':'.
	ErrBadID = errors.New("turn: credential id must be 1-128 characters without ':'")
)
