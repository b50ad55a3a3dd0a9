package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/supervisor/store"
)

// Error codes of access control.
const (
	CodeForbidden   = "forbidden"    // 403
	CodeRateLimited = "rate_limited" // 429
)

// Keys (SPEC section 10).
const (
	// KeyPrefix starts every API key: berth_k_<id>_<secret>.
	KeyPrefix = "berth_k_"
	// KeySecretBytes is the size of a key's random secret.
	KeySecretBytes = 32
	// KeyTouchEvery is how often a key's last use is written at most.
	KeyTouchEvery = time.Minute
	// ActorOperator is the actor of SUPERVISOR_TOKEN in the audit log.
	ActorOperator = "operator"
)

// Principal is who makes a request: the operator (SUPERVISOR_TOKEN or an
// operator key), or a workspace or agent key.
type Principal struct {
	// Actor is the key's id, or ActorOperator for SUPERVISOR_TOKEN.
	Actor     string
	Scope     string
	Workspace string // workspace and agent keys
	Agent     string // agent keys
}

// Operator is the principal of SUPERVISOR_TOKEN.
var Operator = Principal{Actor: ActorOperator, Scope: store.ScopeOperator}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf returns the principal ctx carries; a context without one
// is the operator's (calls made by the supervisor itself).
func PrincipalOf(ctx context.Context) Principal {
	if p, ok := ctx.Value(principalKey{}).(Principal); ok {
		return p
	}
	return Operator
}

// Describe says what p may do, for 403 messages.
func (p Principal) Describe() string {
	switch p.Scope {
	case store.ScopeWorkspace:
		return fmt.Sprintf("key %s has scope workspace: it may manage the agents, connections, usage, cleanups, pairing codes, keys and audit log of workspace %q only", p.Actor, p.Workspace)
	case store.ScopeAgent:
		return fmt.Sprintf("key %s has scope agent: it may only use the computer tools (start, stop, exec, read_file, write_file, view, screenshot, status) of agent %q", p.Actor, p.Agent)
	}
	return "operator"
}

// Forbidden is the 403 answered to p for what it tried.
func (p Principal) Forbidden(what string) *Error {
	return errorf(http.StatusForbidden, CodeForbidden, "%s is not allowed: %s", what, p.Describe())
}

func unauthorized(msg string) *Error {
	return errorf(http.StatusUnauthorized, CodeUnauthorized, "%s", msg)
}

// Authenticate returns the principal of an API key. It reads the store on
// every call, so a revoked key is refused at once by every supervisor
// sharing it. Unknown, malformed, expired and revoked keys are 401.
func (s *Service) Authenticate(ctx context.Context, secret string) (Principal, error) {
	id, _, ok := parseKey(secret)
	if !ok {
		return Principal{}, unauthorized("missing or wrong bearer token (Authorization: Bearer $SUPERVISOR_TOKEN or an API key)")
	}
	k, err := s.st.GetKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !token.Check(secret, k.Hash)) {
		return Principal{}, unauthorized("unknown API key")
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate key: %w", err)
	}
	return s.keyPrincipal(ctx, k)
}

// KeyPrincipal returns the principal of the key id, checked again as
// Authenticate checks a key, for a caller that proved the key's secret
// earlier (a console session): a revoked, expired or deleted key is 401.
func (s *Service) KeyPrincipal(ctx context.Context, id string) (Principal, error) {
	k, err := s.st.GetKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, unauthorized("unknown API key")
	}
	if err != nil {
		return Principal{}, fmt.Errorf("key %s: %w", id, err)
	}
	return s.keyPrincipal(ctx, k)
}

// keyPrincipal checks that k may be used now and returns its principal.
func (s *Service) keyPrincipal(ctx context.Context, k store.Key) (Principal, error) {
	now := s.clk.Now().UTC()
	if !k.RevokedAt.IsZero() {
		return Principal{}, unauthorized(fmt.Sprintf("API key %s was revoked", k.ID))
	}
	if !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
		return Principal{}, unauthorized(fmt.Sprintf("API key %s expired at %s", k.ID, k.ExpiresAt.Format(time.RFC3339)))
	}
	if now.Sub(k.LastUsedAt) >= KeyTouchEvery {
		if err := s.st.TouchKey(ctx, k.ID, now); err != nil {
			s.log.Warn("record key use", "key", k.ID, "err", err)
		}
	}
	return Principal{Actor: k.ID, Scope: k.Scope, Workspace: k.Workspace, Agent: k.AgentID}, nil
}

// parseKey splits berth_k_<id>_<secret>.
func parseKey(s string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(s, KeyPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || id == "" || secret == "" || len(id) > 64 {
		return "", "", false
	}
	return id, secret, true
}

// AgentWorkspace returns the workspace of an agent, or a 404.
func (s *Service) AgentWorkspace(ctx context.Context, agent string) (string, error) {
	a, err := s.st.GetAgent(ctx, agent)
	if err != nil {
		return "", s.agentErr(agent, err)
	}
	return a.Workspace, nil
}

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest = api.CreateKeyRequest

// KeyView is a key as the API shows it.
type KeyView = api.Key

func keyView(k store.Key) KeyView {
	return KeyView{ID: k.ID, Name: k.Name, Scope: k.Scope, Workspace: k.Workspace, Agent: k.AgentID,
		CreatedAt: k.CreatedAt, CreatedBy: k.CreatedBy, LastUsedAt: k.LastUsedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
}

// CreateKey makes an API key for the principal in ctx: the operator may
// make any key, a workspace key only workspace and agent keys of its own
// workspace, an agent key none. The secret is in the answer only; the
// store keeps its SHA-256.
func (s *Service) CreateKey(ctx context.Context, r CreateKeyRequest) (KeyView, error) {
	p := PrincipalOf(ctx)
	if p.Scope == store.ScopeAgent {
		return KeyView{}, p.Forbidden("creating keys")
	}
	name := strings.TrimSpace(r.Name)
	if name == "" || len(name) > 200 {
		return KeyView{}, badRequest("name: required, at most 200 characters")
	}
	if r.ExpiresInSeconds < 0 {
		return KeyView{}, badRequest("expiresInSeconds: must not be negative")
	}
	if r.ExpiresInSeconds > 0 && !r.ExpiresAt.IsZero() {
		return KeyView{}, badRequest("expiresAt, expiresInSeconds: give at most one")
	}
	if !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(s.clk.Now()) {
		return KeyView{}, badRequest("expiresAt: must be in the future")
	}
	k := store.Key{ID: newID("k"), Name: name, Scope: r.Scope, CreatedBy: p.Actor}
	switch r.Scope {
	case store.ScopeOperator:
		if p.Scope != store.ScopeOperator {
			return KeyView{}, p.Forbidden("creating an operator key")
		}
		if r.Workspace != "" || r.Agent != "" {
			return KeyView{}, badRequest("workspace, agent: an operator key takes neither")
		}
	case store.ScopeWorkspace:
		if r.Agent != "" {
			return KeyView{}, badRequest("agent: a workspace key takes none")
		}
		if r.Workspace == "" && p.Scope == store.ScopeWorkspace {
			r.Workspace = p.Workspace
		}
		if !idRE.MatchString(r.Workspace) {
			return KeyView{}, badRequest("workspace: %q must be 1 to 64 letters, digits, '.', '_' or '-'", r.Workspace)
		}
		if p.Scope == store.ScopeWorkspace && r.Workspace != p.Workspace {
			return KeyView{}, p.Forbidden(fmt.Sprintf("creating a key for workspace %q", r.Workspace))
		}
		k.Workspace = r.Workspace
	case store.ScopeAgent:
		if r.Agent == "" {
			return KeyView{}, badRequest("agent: required for an agent key")
		}
		ws, err := s.AgentWorkspace(ctx, r.Agent)
		if err != nil {
			return KeyView{}, err
		}
		if p.Scope == store.ScopeWorkspace && ws != p.Workspace {
			// Answered like a missing agent, so that other workspaces'
			// agents are not revealed.
			return KeyView{}, s.agentErr(r.Agent, store.ErrNotFound)
		}
		if r.Workspace != "" && r.Workspace != ws {
			return KeyView{}, badRequest("workspace: agent %q is in workspace %q", r.Agent, ws)
		}
		k.Workspace, k.AgentID = ws, r.Agent
	default:
		return KeyView{}, badRequest("scope: %q must be operator, workspace or agent", r.Scope)
	}
	secret, err := token.NewSecret(KeySecretBytes)
	if err != nil {
		return KeyView{}, err
	}
	full := KeyPrefix + k.ID + "_" + secret
	now := s.clk.Now().UTC()
	k.Hash, k.CreatedAt = token.Hash(full), now
	if r.ExpiresInSeconds > 0 {
		k.ExpiresAt = now.Add(time.Duration(r.ExpiresInSeconds) * time.Second)
	} else if !r.ExpiresAt.IsZero() {
		k.ExpiresAt = r.ExpiresAt.UTC()
	}
	if err := s.st.CreateKey(ctx, k); err != nil {
		return KeyView{}, fmt.Errorf("create key: %w", err)
	}
	s.log.Info("key created", "key", k.ID, "scope", k.Scope, "workspace", k.Workspace, "agent", k.AgentID, "by", p.Actor)
	s.Record(ctx, "key.create", k.Workspace, k.ID, k.Scope)
	v := keyView(k)
	v.Secret = full
	return v, nil
}

// Keys lists the keys the principal in ctx may see: every key for the
// operator, its workspace's for a workspace key. Secrets and hashes are
// never shown.
func (s *Service) Keys(ctx context.Context) ([]KeyView, error) {
	p := PrincipalOf(ctx)
	ws := ""
	switch p.Scope {
	case store.ScopeOperator:
	case store.ScopeWorkspace:
		ws = p.Workspace
	default:
		return nil, p.Forbidden("listing keys")
	}
	ks, err := s.st.ListKeys(ctx, ws)
	if err != nil {
		return nil, err
	}
	out := make([]KeyView, 0, len(ks))
	for _, k := range ks {
		out = append(out, keyView(k))
	}
	return out, nil
}

// RevokeKey revokes a key at once. A workspace key may revoke its
// workspace's keys; others' are answered 404.
func (s *Service) RevokeKey(ctx context.Context, id string) error {
	p := PrincipalOf(ctx)
	if p.Scope != store.ScopeOperator && p.Scope != store.ScopeWorkspace {
		return p.Forbidden("revoking keys")
	}
	k, err := s.st.GetKey(ctx, id)
	if err == nil && p.Scope == store.ScopeWorkspace && k.Workspace != p.Workspace {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "key %q does not exist", id)
	}
	if err != nil {
		return err
	}
	if err := s.st.RevokeKey(ctx, id, s.clk.Now().UTC()); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	s.log.Info("key revoked", "key", id, "by", p.Actor)
	s.Record(ctx, "key.revoke", k.Workspace, id, "")
	return nil
}

// WorkspaceAgents returns the ids of a workspace's agents.
func (s *Service) WorkspaceAgents(ctx context.Context, workspace string) (map[string]bool, error) {
	as, err := s.st.AgentsIn(ctx, workspace)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(as))
	for _, a := range as {
		out[a.ID] = true
	}
	return out, nil
}
