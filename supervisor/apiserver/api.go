// Package apiserver serves the supervisor's REST API (SPEC section 10) over a
// supervisor.Service: routing, the operator token, strict JSON decoding and
// the error envelope.
package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/ratelimit"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/liveview"
	"github.com/berthdev/berth/supervisor/store"
)

// MaxBodyBytes bounds a request body; the largest legitimate one is a
// 16,000-character write (up to 64 KB of UTF-8, more once JSON-escaped).
const MaxBodyBytes = 1 << 20

// Handler serves the API.
type Handler struct {
	svc   *supervisor.Service
	token string
	log   *slog.Logger
	mux   *http.ServeMux
	// Ready reports whether the supervisor can serve (for /healthz).
	Ready func(context.Context) error
	// Views issues live-view links (supervisor/liveview); nil when live
	// view is off.
	Views interface {
		Issue(ctx context.Context, agent, base string) (liveview.Grant, error)
		Screenshot(ctx context.Context, agent string) ([]byte, error)
		// Handler serves the viewer pages under /view/.
		Handler() http.Handler
	}
	// Lenders lists the lent machines for GET /v1/lenders; nil when no
	// provider runs computers on lent machines (the route is then unknown).
	Lenders func(context.Context) ([]Lender, error)
	// RelayToken is RELAY_TOKEN: when set, a relay running as its own
	// process checks lending agents' tokens at relayserver.AuthenticatePath.
	RelayToken string
	// RelayReport records a relay's report of the lenders it holds
	// (relayserver.ReportPath, guarded by RelayToken); nil leaves the
	// route unknown.
	RelayReport func(context.Context, relayserver.Report) error
	// Egress is the egress proxy whose counters GET /metrics shows; nil
	// when it is off.
	Egress EgressStats
	// PublicURL is the supervisor's URL as browsers reach it, for port
	// preview links (BERTH_PUBLIC_URL); empty: the URL each request came to.
	PublicURL string

	keyLimit  *ratelimit.Limiter // per key (SetRateLimit)
	pairLimit *ratelimit.Limiter // unauthenticated pairing, per client address

	links *terminalLinks // terminal page links (terminalpage.go)

	// Console serves what no API route does, but for paths under /v1/
	// (the operator's console, supervisor/console); nil: such requests
	// are answered 404 in the API's error envelope.
	Console http.Handler
}

// New returns the API handler. token is the operator's SUPERVISOR_TOKEN.
func New(svc *supervisor.Service, token string, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{svc: svc, token: token, log: log.With("component", "api"), mux: http.NewServeMux(),
		keyLimit: ratelimit.New(DefaultRate, DefaultBurst), pairLimit: ratelimit.New(PairRate, PairBurst)}
	h.routes()
	return h
}

func (h *Handler) routes() {
	m := h.mux
	m.HandleFunc("GET /healthz", h.healthz)
	m.Handle("POST /v1/agents", h.auth(workspaceOK, h.createAgent))
	m.Handle("POST /v1/computers", h.auth(workspaceOK, h.connect))
	m.Handle("GET /v1/computers", h.auth(workspaceOK, h.computers))
	m.Handle("GET /v1/agents/{agent}/computer", h.auth(agentTool, h.status))
	m.Handle("DELETE /v1/agents/{agent}/computer", h.auth(agentAdmin, h.disconnect))
	h.toolRoutes()
	h.desktopRoutes()
	h.browserRoutes()
	m.Handle("POST /v1/agents/{agent}/computer/confirm-cleanup", h.auth(agentAdmin, h.confirm))
	m.Handle("POST /v1/agents/{agent}/computer/view", h.auth(agentTool, h.view))
	m.Handle("GET /v1/agents/{agent}/computer/screenshot", h.guard(agentTool, http.HandlerFunc(h.screenshot)))
	h.terminalRoutes()
	m.Handle("GET /v1/usage", h.auth(workspaceOK, h.usage))
	m.Handle("DELETE /v1/workspaces/{workspace}", h.auth(workspaceOK, h.deleteWorkspace))
	m.Handle("POST /v1/companions/pair-codes", h.auth(workspaceOK, h.createPairCode))
	m.HandleFunc("POST /v1/companions/pair", h.pair) // the code is the credential
	h.keyRoutes()
	h.companionRoutes()
	h.hostRoutes()
	m.HandleFunc("/", h.noRoute)
}

// noRoute answers a request no route serves.
func (h *Handler) noRoute(w http.ResponseWriter, r *http.Request) {
	if h.Console != nil && r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
		h.Console.ServeHTTP(w, r)
		return
	}
	writeError(w, &supervisor.Error{Status: http.StatusNotFound, Code: supervisor.CodeNotFound, Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if strings.HasPrefix(r.URL.Path, supervisor.PreviewPath) || h.svc.PreviewHost(r.Host) {
		// Not through the mux, which would answer a path with ".." with a
		// redirect out of the preview: the preview resolves it inside.
		// A host on the preview domain reaches nothing but its preview.
		h.svc.ServePreview(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	if h.Ready != nil {
		if err := h.Ready(r.Context()); err != nil {
			h.log.Warn("not ready", "err", err)
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
			return
		}
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) (any, int, error)

// Protect serves next only to the operator (SUPERVISOR_TOKEN or an
// operator key), answering 401 or 403 like every other route otherwise.
func (h *Handler) Protect(next http.Handler) http.Handler {
	return h.guard(operatorOnly, next)
}

// guard serves next only to callers that check lets through for acc.
func (h *Handler) guard(acc access, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, ok := h.check(w, r, acc); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// auth checks the caller for acc, then runs fn and writes its answer.
func (h *Handler) auth(acc access, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, ok := h.check(w, r, acc)
		if !ok {
			return
		}
		v, status, err := fn(w, r)
		if err != nil {
			writeError(w, h.logged(r, err))
			return
		}
		httpjson.Write(w, status, v)
	})
}

// decode reads a strict JSON body into v: unknown fields, trailing data and
// oversized bodies are refused with the reason.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return supervisor.BodyError(httpjson.Decode(w, r, MaxBodyBytes, v))
}

// decodeOptional is decode for endpoints whose body may be empty.
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	return supervisor.BodyError(httpjson.DecodeOptional(w, r, MaxBodyBytes, v))
}

func writeError(w http.ResponseWriter, e *supervisor.Error) {
	httpjson.WriteError(w, e.Status, e.Code, e.Message)
}

func (h *Handler) createAgent(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var req api.CreateAgentRequest
	if err := decode(w, r, &req); err != nil {
		return nil, 0, err
	}
	if p := principal(r); p.Scope == store.ScopeWorkspace {
		if req.Workspace == "" {
			req.Workspace = p.Workspace
		}
		if req.Workspace != p.Workspace {
			return nil, 0, p.Forbidden(fmt.Sprintf("creating an agent in workspace %q", req.Workspace))
		}
	}
	a, err := h.svc.CreateAgent(r.Context(), req)
	if err == nil {
		h.svc.Record(r.Context(), "agent.create", a.Workspace, a.ID, "")
	}
	return a, http.StatusCreated, err
}

func (h *Handler) createPairCode(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var req api.CreatePairCodeRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return nil, 0, err
	}
	c, err := h.svc.CreatePairCode(r.Context(), req)
	if err == nil {
		// A workspace key's code shows in its workspace's audit log.
		h.svc.Record(r.Context(), "pair_code.create", principal(r).Workspace, "", req.Name)
	}
	return c, http.StatusCreated, err
}

// pair redeems a pairing code; it takes no operator token, and is limited
// per client address before anything is read or written. Neither the code
// nor the token it answers with is logged.
func (h *Handler) pair(w http.ResponseWriter, r *http.Request) {
	if !h.limitPair(w, r) {
		return
	}
	var req api.PairRequest
	err := decode(w, r, &req)
	var p api.Paired
	if err == nil {
		p, err = h.svc.Pair(r.Context(), req)
	}
	if err == nil {
		h.svc.Record(supervisor.WithPrincipal(r.Context(), supervisor.Principal{Actor: "pairing"}), "companion.pair", "", p.LenderID, "")
	}
	if err != nil {
		writeError(w, h.logged(r, err))
		return
	}
	httpjson.Write(w, http.StatusCreated, p)
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var req supervisor.ConnectRequest
	if err := decode(w, r, &req); err != nil {
		return nil, 0, err
	}
	if p := principal(r); p.Scope == store.ScopeWorkspace && req.Agent != "" {
		if err := h.inWorkspace(r, p, req.Agent); err != nil {
			return nil, 0, err
		}
	}
	c, err := h.svc.Connect(r.Context(), req)
	if err == nil {
		h.svc.RecordAgent(r.Context(), "computer.connect", req.Agent)
	}
	return c, http.StatusCreated, err
}

func (h *Handler) computers(w http.ResponseWriter, r *http.Request) (any, int, error) {
	v, err := h.svc.Computers(r.Context())
	if p := principal(r); err == nil && p.Scope == store.ScopeWorkspace {
		mine, err := h.svc.WorkspaceAgents(r.Context(), p.Workspace)
		if err != nil {
			return nil, 0, err
		}
		v = slices.DeleteFunc(v, func(c supervisor.ComputerView) bool { return !mine[c.Agent] })
	}
	return map[string]any{"computers": v}, http.StatusOK, err
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) (any, int, error) {
	v, err := h.svc.Status(r.Context(), r.PathValue("agent"))
	return v, http.StatusOK, err
}

func (h *Handler) disconnect(w http.ResponseWriter, r *http.Request) (any, int, error) {
	agent := r.PathValue("agent")
	err := h.svc.Disconnect(r.Context(), agent)
	if err == nil {
		h.svc.RecordAgent(r.Context(), "computer.disconnect", agent)
	}
	return map[string]any{"agent": agent, "disconnected": true}, http.StatusOK, err
}

// HeaderReplayed marks an answer replayed from an earlier call with the
// same Idempotency-Key.
const HeaderReplayed = "Idempotent-Replayed"

// tool serves one of the five agent tools: it decodes the request, then
// runs it at most once per Idempotency-Key (see Service.Idempotent).
func tool[Req, Resp any](h *Handler, name string, body bool, run func(ctx context.Context, agent string, req Req) (Resp, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, ok := h.check(w, r, agentTool)
		if !ok {
			return
		}
		var req Req
		if body {
			if err := decode(w, r, &req); err != nil {
				writeError(w, supervisor.AsError(err))
				return
			}
		} else if err := decodeOptional(w, r, &req); err != nil {
			writeError(w, supervisor.AsError(err))
			return
		}
		agent := r.PathValue("agent")
		out, replayed, err := h.svc.Idempotent(r.Context(), agent, name, r.Header.Get("Idempotency-Key"), req,
			func(ctx context.Context) supervisor.Outcome {
				v, err := run(ctx, agent, req)
				return h.outcome(r, v, err)
			})
		if err != nil {
			writeError(w, h.logged(r, err))
			return
		}
		if replayed {
			w.Header().Set(HeaderReplayed, "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(out.Status)
		w.Write(out.Body)
	})
}

// outcome encodes a tool's answer or error as the API sends it.
func (h *Handler) outcome(r *http.Request, v any, err error) supervisor.Outcome {
	status, body := http.StatusOK, any(v)
	if err != nil {
		e := h.logged(r, err)
		status, body = e.Status, httpjson.ErrorBody{Error: e}
	}
	raw, _ := json.Marshal(body)
	return supervisor.Outcome{Status: status, Body: append(raw, '\n')}
}

func (h *Handler) logged(r *http.Request, err error) *supervisor.Error {
	e := supervisor.AsError(err)
	if e.Status >= 500 {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", err)
	}
	return e
}

type none struct{}

func (h *Handler) toolRoutes() {
	m := h.mux
	m.Handle("POST /v1/agents/{agent}/computer/start", tool(h, "start", false, func(ctx context.Context, agent string, req api.StartRequest) (api.Session, error) {
		return h.svc.StartFrom(ctx, agent, req.Checkpoint)
	}))
	m.Handle("POST /v1/agents/{agent}/computer/stop", tool(h, "stop", false, func(ctx context.Context, agent string, _ none) (api.Session, error) {
		return h.svc.Stop(ctx, agent)
	}))
	m.Handle("POST /v1/agents/{agent}/computer/exec", tool(h, "exec", true, h.svc.Exec))
	m.Handle("POST /v1/agents/{agent}/computer/read_file", tool(h, "read_file", true, h.svc.ReadFile))
	m.Handle("POST /v1/agents/{agent}/computer/write_file", tool(h, "write_file", true, h.svc.WriteFile))
	m.Handle("POST /v1/agents/{agent}/computer/checkpoints", tool(h, "checkpoint", true, h.svc.Checkpoint))
	m.Handle("GET /v1/agents/{agent}/computer/checkpoints", h.auth(agentTool, h.checkpoints))
	m.Handle("DELETE /v1/agents/{agent}/computer/checkpoints/{name}", h.auth(agentTool, h.deleteCheckpoint))
	m.Handle("POST /v1/agents/{agent}/computer/ports/{port}/preview", h.auth(agentTool, h.preview))
}

// preview issues a port preview link.
func (h *Handler) preview(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var none struct{}
	if err := decodeOptional(w, r, &none); err != nil {
		return nil, 0, err
	}
	base := h.PublicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	v, err := h.svc.Preview(r.Context(), r.PathValue("agent"), r.PathValue("port"), base)
	return v, http.StatusCreated, err
}

func (h *Handler) checkpoints(w http.ResponseWriter, r *http.Request) (any, int, error) {
	v, err := h.svc.Checkpoints(r.Context(), r.PathValue("agent"))
	return api.Checkpoints{Checkpoints: v}, http.StatusOK, err
}

func (h *Handler) deleteCheckpoint(w http.ResponseWriter, r *http.Request) (any, int, error) {
	agent, name := r.PathValue("agent"), r.PathValue("name")
	err := h.svc.DeleteCheckpoint(r.Context(), agent, name)
	return map[string]any{"agent": agent, "checkpoint": name, "deleted": true}, http.StatusOK, err
}

func (h *Handler) confirm(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var req supervisor.ConfirmRequest
	if err := decode(w, r, &req); err != nil {
		return nil, 0, err
	}
	v, err := h.svc.ConfirmCleanup(r.Context(), r.PathValue("agent"), req)
	if err == nil {
		h.svc.RecordAgent(r.Context(), "computer.confirm_cleanup", r.PathValue("agent"))
	}
	return v, http.StatusOK, err
}

func (h *Handler) deleteWorkspace(w http.ResponseWriter, r *http.Request) (any, int, error) {
	ws := r.PathValue("workspace")
	if p := principal(r); p.Scope == store.ScopeWorkspace && ws != p.Workspace {
		return nil, 0, &supervisor.Error{Status: http.StatusNotFound, Code: supervisor.CodeNotFound, Message: fmt.Sprintf("workspace %q has no agents", ws)}
	}
	n, err := h.svc.DeleteWorkspace(r.Context(), ws)
	if err == nil {
		h.svc.Record(r.Context(), "workspace.delete", ws, ws, fmt.Sprintf("%d agents", n))
	}
	return map[string]any{"workspace": ws, "deletedAgents": n}, http.StatusOK, err
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request) (any, int, error) {
	q := r.URL.Query()
	from, err := parseTime("from", q.Get("from"))
	if err != nil {
		return nil, 0, err
	}
	to, err := parseTime("to", q.Get("to"))
	if err != nil {
		return nil, 0, err
	}
	by := q.Get("by")
	p := principal(r)
	if p.Scope == store.ScopeWorkspace {
		// A workspace key sees its own workspace's line only.
		if by == "" {
			by = "workspace"
		}
		if by != "workspace" {
			return nil, 0, p.Forbidden("usage by " + by)
		}
	}
	v, err := h.svc.Usage(r.Context(), by, from, to)
	if err == nil && p.Scope == store.ScopeWorkspace {
		v.Rows = slices.DeleteFunc(v.Rows, func(u store.UsageRow) bool { return u.Key != p.Workspace })
		v.Stored = slices.DeleteFunc(v.Stored, func(u api.StoredRow) bool { return u.Workspace != p.Workspace })
	}
	return v, http.StatusOK, err
}

// parseTime accepts RFC 3339 times and YYYY-MM-DD days (UTC midnight).
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest,
		Message: fmt.Sprintf("%s: %q is neither an RFC 3339 time nor a YYYY-MM-DD day", field, s)}
}

// view issues a live-view link for the agent's desktop session.
func (h *Handler) view(w http.ResponseWriter, r *http.Request) (any, int, error) {
	if h.Views == nil {
		return nil, 0, &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable,
			Message: "live view is off on this supervisor (set TURN_LISTEN, or run berth dev)"}
	}
	var req api.ViewRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return nil, 0, err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	agent := r.PathValue("agent")
	g, err := h.Views.Issue(r.Context(), agent, scheme+"://"+r.Host)
	if err != nil || !req.Terminal {
		return g, http.StatusCreated, err
	}
	// The viewer page opens the terminal beside the screen from a
	// one-time terminal link named in the fragment, which no server sees.
	link, err := h.issueTerminalLink(r, agent)
	if err != nil {
		return nil, 0, err
	}
	g.URL += "#terminal=" + link
	return g, http.StatusCreated, nil
}

// screenshot answers a PNG of the agent's desktop, for previews.
func (h *Handler) screenshot(w http.ResponseWriter, r *http.Request) {
	if h.Views == nil {
		writeError(w, &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable,
			Message: "live view is off on this supervisor (set TURN_LISTEN, or run berth dev)"})
		return
	}
	png, err := h.Views.Screenshot(r.Context(), r.PathValue("agent"))
	if err != nil {
		writeError(w, h.logged(r, err))
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Write(png)
}
