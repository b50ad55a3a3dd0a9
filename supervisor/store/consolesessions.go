package store

import (
	"context"
	"time"
)

// ConsoleSession is a browser signed in to the console. The store holds
// the SHA-256 of the session's cookie, never the cookie, and never the key
// it signed in with: Actor names the key (or the operator), and
// OperatorMark, for the operator, a hash of the token it signed in with,
// so that a new SUPERVISOR_TOKEN ends the sessions of the old one.
type ConsoleSession struct {
	IDHash       string // hex SHA-256 of the cookie's value
	CSRF         string // the token every form carries
	Actor        string // the key's id, or the operator
	OperatorMark string // for the operator: a hash of the token
	CreatedAt    time.Time
	LastUsed     time.Time
	Flash        string // a message for the session's next page
}

// ConsoleSessions keeps the console's sessions, so that every supervisor
// sharing the store serves a browser signed in at any of them. Every Store
// implements it.
type ConsoleSessions interface {
	// AddConsoleSession records a new session; ErrConflict when its id
	// hash is taken.
	AddConsoleSession(ctx context.Context, x ConsoleSession) error
	// GetConsoleSession returns a session by the hash of its id, or
	// ErrNotFound.
	GetConsoleSession(ctx context.Context, idHash string) (ConsoleSession, error)
	// TouchConsoleSession records a use at now.
	TouchConsoleSession(ctx context.Context, idHash string, now time.Time) error
	// SetConsoleFlash leaves a message for the session's next page; ""
	// clears it.
	SetConsoleFlash(ctx context.Context, idHash, flash string) error
	// DeleteConsoleSession removes a session; one that is gone is no error.
	DeleteConsoleSession(ctx context.Context, idHash string) error
	// PurgeConsoleSessions deletes the sessions last used before before.
	PurgeConsoleSessions(ctx context.Context, before time.Time) (int64, error)
}
