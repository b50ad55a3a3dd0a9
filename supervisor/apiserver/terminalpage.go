package apiserver

import (
	"crypto/rand"
	"embed"
	"fmt"
	"net/http"
	"path"
	"sync"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
)

// termPage is the terminal page and what it loads: xterm.js and its fit
// addon as their npm packages ship them (see termpage/VERSIONS).
//
//go:embed termpage
var termPage embed.FS

const (
	// terminalLinkTTL is how long a terminal link may wait for its page.
	terminalLinkTTL = 2 * time.Minute
	// maxTerminalLinks bounds the links waiting in one process.
	maxTerminalLinks = 1000
	// terminalPageCSP keeps the page to its own files and websocket; only
	// the supervisor's own pages (the viewer page) may frame it.
	terminalPageCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'self'"
)

// terminalLinks are the issued, unused terminal links of this process.
type terminalLinks struct {
	mu sync.Mutex
	m  map[string]terminalLink
}

type terminalLink struct {
	agent   string
	by      supervisor.Principal
	expires time.Time
}

// take returns and forgets the link of token, if it is still good.
func (l *terminalLinks) take(token string) (terminalLink, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.m[token]
	delete(l.m, token)
	return k, ok && time.Now().Before(k.expires)
}

func (l *terminalLinks) put(token string, k terminalLink) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for t, v := range l.m {
		if !now.Before(v.expires) {
			delete(l.m, t)
		}
	}
	if len(l.m) >= maxTerminalLinks {
		return &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable,
			Message: fmt.Sprintf("%d terminal links wait for their page; retry in a minute", maxTerminalLinks)}
	}
	l.m[token] = k
	return nil
}

// terminalRoutes serves the terminal routes: the websocket, and the page
// that opens one in a browser from a one-time link.
func (h *Handler) terminalRoutes() {
	h.links = &terminalLinks{m: make(map[string]terminalLink)}
	m := h.mux
	m.HandleFunc("GET /v1/agents/{agent}/computer/terminal", h.terminal)
	m.Handle("POST /v1/agents/{agent}/computer/terminal/link", h.auth(agentTool, h.terminalLink))
	m.HandleFunc("GET /terminal/assets/{file}", h.terminalAsset)
	m.HandleFunc("GET /terminal/s/{token}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusFound)
	})
	m.HandleFunc("GET /terminal/s/{token}/{$}", h.terminalPage)
	m.HandleFunc("GET /terminal/s/{token}/ws", h.terminalPageSocket)
}

// terminalLink issues a one-time link to the terminal page for the agent,
// on behalf of the caller.
func (h *Handler) terminalLink(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var none struct{}
	if err := decodeOptional(w, r, &none); err != nil {
		return nil, 0, err
	}
	token, err := h.issueTerminalLink(r, r.PathValue("agent"))
	if err != nil {
		return nil, 0, err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return api.TerminalLink{URL: scheme + "://" + r.Host + "/terminal/s/" + token + "/", ExpiresAt: time.Now().Add(terminalLinkTTL).UTC()}, http.StatusCreated, nil
}

// issueTerminalLink makes a one-time terminal link's token for the
// agent's running computer, on behalf of the caller of r.
func (h *Handler) issueTerminalLink(r *http.Request, agent string) (string, error) {
	// Refuse now what the page would be refused: no agent, no computer.
	st, err := h.svc.Status(r.Context(), agent)
	if err != nil {
		return "", err
	}
	if st.Session == nil || st.Session.State != api.StateRunning {
		return "", &supervisor.Error{Status: http.StatusConflict, Code: supervisor.CodeNoSession,
			Message: fmt.Sprintf("agent %q has no running computer; start it first", agent)}
	}
	token := rand.Text()
	if err := h.links.put(token, terminalLink{agent: agent, by: principal(r), expires: time.Now().Add(terminalLinkTTL)}); err != nil {
		return "", err
	}
	return token, nil
}

func (h *Handler) terminalAsset(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	ct, ok := types[path.Ext(file)]
	b, err := termPage.ReadFile("termpage/" + file)
	if !ok || err != nil {
		h.noRoute(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(b)
}

func (h *Handler) terminalPage(w http.ResponseWriter, r *http.Request) {
	b, _ := termPage.ReadFile("termpage/index.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", terminalPageCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Write(b)
}

// terminalPageSocket redeems a terminal link: the terminal websocket, as
// the link's issuer, for the login shell.
func (h *Handler) terminalPageSocket(w http.ResponseWriter, r *http.Request) {
	k, ok := h.links.take(r.PathValue("token"))
	if !ok {
		writeError(w, &supervisor.Error{Status: http.StatusNotFound, Code: supervisor.CodeNotFound,
			Message: "this terminal link is unknown, used or expired; ask for a new one (berth computer shell --link)"})
		return
	}
	req, err := terminalQuery(r)
	if err != nil {
		writeError(w, supervisor.AsError(err))
		return
	}
	req.Command = ""
	r = r.WithContext(supervisor.WithPrincipal(r.Context(), k.by))
	h.serveTerminal(w, r, k.agent, req)
}

// Link issues, for the operator's console, what POST .../computer/view
// (kind "view", or "view-terminal" with the terminal beside the screen)
// and POST .../computer/terminal/link (kind "terminal") answer: a URL to
// open in the browser. The caller has checked that r's principal may use
// the agent.
func (h *Handler) Link(r *http.Request, agent, kind string) (string, error) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host
	switch kind {
	case "terminal":
		token, err := h.issueTerminalLink(r, agent)
		if err != nil {
			return "", err
		}
		return base + "/terminal/s/" + token + "/", nil
	case "view", "view-terminal":
		if h.Views == nil {
			return "", &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable,
				Message: "live view is off on this supervisor (set TURN_LISTEN, or run berth dev)"}
		}
		g, err := h.Views.Issue(r.Context(), agent, base)
		if err != nil || kind == "view" {
			return g.URL, err
		}
		token, err := h.issueTerminalLink(r, agent)
		if err != nil {
			return "", err
		}
		return g.URL + "#terminal=" + token, nil
	}
	return "", &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: fmt.Sprintf("kind: %q must be view, view-terminal or terminal", kind)}
}
