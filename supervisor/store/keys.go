package store

import (
	"context"
	"time"
)

// Key scopes (docs/security.md).
const (
	// ScopeOperator may do everything, like SUPERVISOR_TOKEN.
	ScopeOperator = "operator"
	// ScopeWorkspace may manage its own workspace's agents, connections,
	// usage, cleanups, pairing codes, keys and audit log.
	ScopeWorkspace = "workspace"
	// ScopeAgent may use the computer tools of its one agent.
	ScopeAgent = "agent"
)

// Key is an API key. Only the SHA-256 (hex) of its secret is kept.
type Key struct {
	ID        string
	Name      string
	Scope     string
	Workspace string // ScopeWorkspace and ScopeAgent keys: their workspace
	AgentID   string // ScopeAgent keys: their agent
	Hash      string
	CreatedAt time.Time
	// LastUsedAt is kept to the minute; zero until first used.
	LastUsedAt time.Time
	// ExpiresAt and RevokedAt are zero when the key does not expire and
	// has not been revoked.
	ExpiresAt time.Time
	RevokedAt time.Time
	// CreatedBy is the key id (or "operator") that created it.
	CreatedBy string
}

// AuditEntry is one account action: who (a key id, or "operator" for
// SUPERVISOR_TOKEN), in which workspace, did what to what.
type AuditEntry struct {
	ID        string
	At        time.Time
	Actor     string
	Workspace string
	Action    string
	Target    string
	Detail    string
}

// Keys keeps API keys and the audit log; every Store implements it.
type Keys interface {
	// CreateKey records k; ErrConflict when its id exists.
	CreateKey(ctx context.Context, k Key) error
	// GetKey returns a key by id, revoked or not, or ErrNotFound.
	GetKey(ctx context.Context, id string) (Key, error)
	// ListKeys lists the keys of workspace ("" lists every key), oldest
	// first.
	ListKeys(ctx context.Context, workspace string) ([]Key, error)
	// RevokeKey marks the key revoked at at; revoking a revoked key keeps
	// the first time. ErrNotFound when there is no such key.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// TouchKey sets the key's last use to at.
	TouchKey(ctx context.Context, id string, at time.Time) error

	// AppendAudit records e.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// Audit lists the entries of workspace ("" is every workspace) before
	// before (zero: now), newest first, at most limit.
	Audit(ctx context.Context, workspace string, before time.Time, limit int) ([]AuditEntry, error)
}
