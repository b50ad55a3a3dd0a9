package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Key scopes (SPEC section 10).
const (
	// ScopeOperator may do everything, like SUPERVISOR_TOKEN.
	ScopeOperator = "operator"
	// ScopeWorkspace may manage its own workspace: agents, connections,
	// usage, cleanups, pairing codes, keys and audit log.
	ScopeWorkspace = "workspace"
	// ScopeAgent may use the computer tools of its one agent.
	ScopeAgent = "agent"
)

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	Name  string `json:"name"`
	Scope string `json:"scope"`
	// Workspace is required for workspace keys; agent keys take their
	// agent's workspace.
	Workspace string `json:"workspace,omitempty"`
	// Agent is required for agent keys.
	Agent string `json:"agent,omitempty"`
	// ExpiresInSeconds, when positive, makes the key expire that long
	// after its creation; ExpiresAt makes it expire then. At most one of
	// the two is given.
	ExpiresInSeconds int       `json:"expiresInSeconds,omitempty"`
	ExpiresAt        time.Time `json:"expiresAt,omitzero"`
}

// Key is an API key as the API shows it. Secret (JSON "key", the bearer
// token berth_k_<id>_<secret>) is set only in the answer to its creation:
// it is shown once and never kept.
type Key struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Scope      string    `json:"scope"`
	Workspace  string    `json:"workspace,omitempty"`
	Agent      string    `json:"agent,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	CreatedBy  string    `json:"createdBy,omitempty"`
	LastUsedAt time.Time `json:"lastUsedAt,omitzero"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
	RevokedAt  time.Time `json:"revokedAt,omitzero"`
	Secret     string    `json:"key,omitempty"`
}

// KeyList is the answer of GET /v1/keys.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// AuditEntry is one account action of the audit log.
type AuditEntry struct {
	ID        string    `json:"id"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	Workspace string    `json:"workspace,omitempty"`
	Action    string    `json:"action"`
	Target    string    `json:"target,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// AuditLog is the answer of GET /v1/audit, newest first.
type AuditLog struct {
	Entries []AuditEntry `json:"entries"`
}

// Companion is a paired lender's machine as GET /v1/companions shows it.
type Companion struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"createdAt"`
	LastSeenAt time.Time `json:"lastSeenAt,omitzero"`
	Online     bool      `json:"online"`
}

// CompanionList is the answer of GET /v1/companions.
type CompanionList struct {
	Companions []Companion `json:"companions"`
}

// CreateKey makes an API key; the answer carries its secret, shown once.
func (c *Client) CreateKey(ctx context.Context, r CreateKeyRequest) (*Key, error) {
	var out Key
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/keys", in: r, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keys lists the keys the caller may see (a workspace key: its workspace's).
func (c *Client) Keys(ctx context.Context) ([]Key, error) {
	var out KeyList
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/keys", out: &out, repeatable: true}); err != nil {
		return nil, err
	}
	return out.Keys, nil
}

// RevokeKey revokes a key at once.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/keys/" + url.PathEscape(id), repeatable: true})
}

// Audit lists audit entries before before (zero: now), newest first, at
// most limit (0: the supervisor's default).
func (c *Client) Audit(ctx context.Context, before time.Time, limit int) ([]AuditEntry, error) {
	q := url.Values{}
	if !before.IsZero() {
		q.Set("before", before.UTC().Format(time.RFC3339Nano))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out AuditLog
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/audit", query: q, out: &out, repeatable: true}); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// Companions lists the paired lenders (operator).
func (c *Client) Companions(ctx context.Context) ([]Companion, error) {
	var out CompanionList
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/companions", out: &out, repeatable: true}); err != nil {
		return nil, err
	}
	return out.Companions, nil
}

// RevokeCompanion unpairs a lender at once: its token is refused, its relay
// link dropped and its sessions ended (operator).
func (c *Client) RevokeCompanion(ctx context.Context, id string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/companions/" + url.PathEscape(id), repeatable: true})
}
