package supervisor

import (
	"context"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor/store"
)

// Audit log limits.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// Record appends an account action to the audit log, with the principal
// in ctx as its actor. The action has happened: a failure to record it is
// logged, not returned.
func (s *Service) Record(ctx context.Context, action, workspace, target, detail string) {
	e := store.AuditEntry{ID: newID("au_"), At: s.clk.Now().UTC(), Actor: PrincipalOf(ctx).Actor,
		Workspace: workspace, Action: action, Target: target, Detail: detail}
	if err := s.st.AppendAudit(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("audit log: append failed", "action", action, "target", target, "err", err)
	}
}

// RecordAgent is Record for an action on an agent, in the agent's
// workspace.
func (s *Service) RecordAgent(ctx context.Context, action, agent string) {
	ws, _ := s.AgentWorkspace(context.WithoutCancel(ctx), agent)
	s.Record(ctx, action, ws, agent, "")
}

// AuditEntryView is an audit entry as the API shows it.
type AuditEntryView = api.AuditEntry

// Audit lists the audit log the principal in ctx may see (the operator:
// every workspace; a workspace key: its own), newest first, before before
// (zero: now), at most limit (0: DefaultAuditLimit).
func (s *Service) Audit(ctx context.Context, before time.Time, limit int) ([]AuditEntryView, error) {
	p := PrincipalOf(ctx)
	ws := ""
	switch p.Scope {
	case store.ScopeOperator:
	case store.ScopeWorkspace:
		ws = p.Workspace
	default:
		return nil, p.Forbidden("reading the audit log")
	}
	if limit == 0 {
		limit = DefaultAuditLimit
	}
	if limit < 0 || limit > MaxAuditLimit {
		return nil, limitf("limit: %d is outside 1..%d", limit, MaxAuditLimit)
	}
	es, err := s.st.Audit(ctx, ws, before, limit)
	if err != nil {
		return nil, err
	}
	out := make([]AuditEntryView, 0, len(es))
	for _, e := range es {
		out = append(out, AuditEntryView{ID: e.ID, At: e.At, Actor: e.Actor, Workspace: e.Workspace, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	return out, nil
}
