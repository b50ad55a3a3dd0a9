package apiserver

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// access is who may call a route (SPEC section 10, "Keys and scopes").
type access int

const (
	// operatorOnly routes take SUPERVISOR_TOKEN or an operator key.
	operatorOnly access = iota
	// workspaceOK routes also take workspace keys; the handler (or the
	// Service) narrows the answer to the key's workspace.
	workspaceOK
	// agentAdmin routes under /v1/agents/{agent}/ take workspace keys of
	// the agent's workspace; agent keys are refused.
	agentAdmin
	// agentTool routes under /v1/agents/{agent}/ also take the agent's own
	// agent key.
	agentTool
)

// check authenticates the request and checks that its principal may call
// a route of access acc. It answers 401, 403 or 404 itself and returns
// false; otherwise it returns the request with the principal in its
// context.
//
// A workspace key naming an agent of another workspace is answered 404,
// exactly as for an agent that does not exist, so that agent ids of other
// workspaces do not leak. An agent key naming another agent is answered
// 403: it already knows which agent is its own.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, acc access) (*http.Request, bool) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	var p supervisor.Principal
	switch {
	case !ok || got == "":
		writeError(w, &supervisor.Error{Status: http.StatusUnauthorized, Code: supervisor.CodeUnauthorized,
			Message: "missing bearer token (Authorization: Bearer $SUPERVISOR_TOKEN or an API key)"})
		return r, false
	case subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) == 1:
		p = supervisor.Operator
	default:
		var err error
		if p, err = h.svc.Authenticate(r.Context(), got); err != nil {
			writeError(w, h.logged(r, err))
			return r, false
		}
	}
	if !h.limit(w, p.Actor) {
		return r, false
	}
	r = r.WithContext(supervisor.WithPrincipal(r.Context(), p))
	if err := h.allowed(r, p, acc); err != nil {
		writeError(w, h.logged(r, err))
		return r, false
	}
	return r, true
}

func (h *Handler) allowed(r *http.Request, p supervisor.Principal, acc access) error {
	what := fmt.Sprintf("%s %s", r.Method, r.URL.Path)
	switch p.Scope {
	case store.ScopeOperator:
		return nil
	case store.ScopeWorkspace:
		switch acc {
		case operatorOnly:
			return p.Forbidden(what)
		case agentAdmin, agentTool:
			return h.inWorkspace(r, p, r.PathValue("agent"))
		}
		return nil
	case store.ScopeAgent:
		if acc != agentTool {
			return p.Forbidden(what)
		}
		if agent := r.PathValue("agent"); agent != p.Agent {
			return p.Forbidden(fmt.Sprintf("using the computer of agent %q", agent))
		}
		return nil
	}
	return p.Forbidden(what)
}

// inWorkspace answers 404 unless agent is in the workspace key's workspace.
func (h *Handler) inWorkspace(r *http.Request, p supervisor.Principal, agent string) error {
	ws, err := h.svc.AgentWorkspace(r.Context(), agent)
	if err != nil {
		return err
	}
	if ws != p.Workspace {
		return &supervisor.Error{Status: http.StatusNotFound, Code: supervisor.CodeNotFound, Message: fmt.Sprintf("agent %q does not exist", agent)}
	}
	return nil
}

// principal returns the principal check put in the request's context.
func principal(r *http.Request) supervisor.Principal { return supervisor.PrincipalOf(r.Context()) }
