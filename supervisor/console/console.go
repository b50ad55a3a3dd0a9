// Package console serves the operator's console: server-rendered pages
// over a supervisor.Service for computers, sessions that need attention,
// usage, lenders and providers, behind a sign-in with the operator token
// or an operator or workspace key. It holds no business rules of its own:
// every check and change is the Service's.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/ratelimit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// CSP is the console's Content-Security-Policy: its own script and style
// files only, nothing inline, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// maxFormBytes bounds a form post.
const maxFormBytes = 64 << 10

// SigninRate and SigninBurst limit sign-in attempts per client address:
// 10 a minute.
const (
	SigninRate  = 10.0 / 60
	SigninBurst = 10
)

// Lender is a lent machine as the relay reports it.
type Lender struct {
	ID, Name    string
	Online      bool
	ConnectedAt time.Time
	LastSeen    time.Time
	Version     string
	// Computers is how many computers it runs now; Limits what its owner
	// allows, as its agent reported them ("" when not reported).
	Computers int
	Limits    string
}

// Options configure the console.
type Options struct {
	Service *supervisor.Service
	// Token is SUPERVISOR_TOKEN.
	Token string
	// Providers are the configured providers by id; DefaultProvider the
	// one chosen first in forms.
	Providers       map[string]providers.Provider
	DefaultProvider string
	// Getenv reads the supervisor's settings for the providers page
	// (secret settings are never shown); nil shows defaults only.
	Getenv func(string) string
	// Lenders lists the lent machines; nil when no provider uses them.
	Lenders func(context.Context) ([]Lender, error)
	// Link issues a live-view or terminal URL for an agent (kind "view",
	// "view-terminal" or "terminal"; apiserver.Handler.Link); nil hides
	// those buttons.
	Link func(r *http.Request, agent, kind string) (string, error)
	// Store keeps the console's sessions, shared by every supervisor on
	// it.
	Store store.ConsoleSessions
	// PublicURL is the supervisor's URL as browsers reach it
	// (BERTH_PUBLIC_URL). When TLS ends at a proxy in front of the
	// supervisor, an https PublicURL makes the session cookie Secure and
	// is the origin forms are accepted from.
	PublicURL string
	// IdleTimeout ends idle sessions (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	Clock       clock.Clock
	Logger      *slog.Logger
}

// Console is the console's http.Handler.
type Console struct {
	o      Options
	svc    *supervisor.Service
	log    *slog.Logger
	clk    clock.Clock
	tmpl   map[string]*template.Template
	mux    *http.ServeMux
	sess   *sessions
	assets http.Handler
	// signins limits sign-in attempts per client address.
	signins *ratelimit.Limiter
}

// pages are the templates rendered with layout.html.
var pages = []string{"signin", "computers", "agent", "session", "attention", "confirm", "usage", "lenders", "providers", "error"}

// New returns the console.
func New(o Options) (*Console, error) {
	if o.Service == nil || o.Store == nil {
		return nil, errors.New("console: Service and Store are required")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	c := &Console{o: o, svc: o.Service, log: o.Logger.With("component", "console"), clk: o.Clock,
		tmpl: map[string]*template.Template{}, mux: http.NewServeMux(),
		sess:    &sessions{st: o.Store, clk: o.Clock, idle: o.IdleTimeout, token: o.Token},
		signins: ratelimit.New(SigninRate, SigninBurst)}
	funcs := template.FuncMap{
		"when":     c.when,
		"duration": duration,
		"ms": func(d time.Duration) string {
			if d < time.Second {
				return fmt.Sprintf("%d ms", d.Milliseconds())
			}
			return fmt.Sprintf("%.1f s", d.Seconds())
		},
		"left": left,
		"stateText": func(s string) string {
			if t, ok := stateText[s]; ok {
				return t
			}
			return s
		},
	}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/rows.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		c.tmpl[p] = t
	}
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		return nil, err
	}
	c.assets = http.StripPrefix("/assets/", http.FileServerFS(sub))
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	m := c.mux
	m.Handle("GET /assets/", c.assets)
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/computers", http.StatusSeeOther) })
	m.HandleFunc("GET /signin", c.signinPage)
	m.HandleFunc("POST /signin", c.signin)
	m.Handle("POST /signout", c.post(c.signout))
	m.Handle("GET /computers", c.page(c.computers))
	m.Handle("GET /live/computers", c.page(c.liveComputers))
	m.Handle("POST /agents", c.post(c.createAgent))
	m.Handle("POST /computers", c.post(c.connect))
	m.Handle("GET /agents/{agent}", c.page(c.agent))
	m.Handle("POST /agents/{agent}/limits", c.post(c.limits))
	m.Handle("POST /agents/{agent}/start", c.post(c.start))
	m.Handle("POST /agents/{agent}/stop", c.post(c.stop))
	m.Handle("POST /agents/{agent}/disconnect", c.post(c.disconnect))
	m.Handle("POST /agents/{agent}/open", c.post(c.openLink))
	m.Handle("POST /agents/{agent}/checkpoints", c.post(c.checkpoint))
	m.Handle("POST /agents/{agent}/checkpoints/{name}/delete", c.post(c.deleteCheckpoint))
	m.Handle("GET /sessions/{id}", c.page(c.session))
	m.Handle("GET /attention", c.page(c.attention))
	m.Handle("GET /live/attention", c.page(c.liveAttention))
	m.Handle("GET /attention/{agent}/confirm", c.page(c.confirmPage))
	m.Handle("POST /attention/{agent}/confirm", c.post(c.confirm))
	m.Handle("GET /usage", c.page(c.usage))
	m.Handle("GET /usage.csv", c.page(c.usageCSV))
	m.Handle("GET /lenders", c.page(c.lenders))
	m.Handle("POST /lenders/pair-codes", c.post(c.pairCode))
	m.Handle("POST /lenders/{id}/revoke", c.post(c.revoke))
	m.Handle("GET /providers", c.page(c.providersPage))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", &view{Title: "Not found", Error: fmt.Sprintf("There is no page at %s.", r.URL.Path)})
	})
}

// SetLink sets Options.Link, before the console serves.
func (c *Console) SetLink(f func(r *http.Request, agent, kind string) (string, error)) { c.o.Link = f }

// SetLenders sets Options.Lenders, before the console serves.
func (c *Console) SetLenders(f func(context.Context) ([]Lender, error)) { c.o.Lenders = f }

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	if strings.HasPrefix(r.URL.Path, "/assets/") {
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Cache-Control", "no-store")
	}
	c.mux.ServeHTTP(w, r)
}

// view is what every page template gets.
type view struct {
	Title  string
	Nav    string
	User   string
	CSRF   string
	Flash  string
	Error  string
	Signed bool
	// Operator is true for the operator's sessions (token or operator key).
	Operator bool
	// Attention is how many sessions need attention, for the menu.
	Attention int
	Data      any
}

// request is a signed-in request.
type request struct {
	*http.Request
	s session
}

func (q request) ctx() context.Context { return q.Context() }

// view returns the page's view for the request's session.
func (q request) view(title, nav string, data any) *view {
	user := "operator"
	switch q.s.p.Scope {
	case store.ScopeWorkspace:
		user = "workspace " + q.s.p.Workspace + " (key " + q.s.p.Actor + ")"
	case store.ScopeOperator:
		if q.s.p.Actor != supervisor.ActorOperator {
			user = "operator (key " + q.s.p.Actor + ")"
		}
	}
	return &view{Title: title, Nav: nav, User: user, CSRF: q.s.csrf, Flash: q.s.flash, Signed: true,
		Operator: q.s.p.Scope == store.ScopeOperator, Data: data}
}

// workspace is the workspace the session is limited to ("" for all).
func (q request) workspace() string {
	if q.s.p.Scope == store.ScopeWorkspace {
		return q.s.p.Workspace
	}
	return ""
}

// pageFunc serves a page for a signed-in session.
type pageFunc func(w http.ResponseWriter, q request)

// authenticate finds the request's session and checks its credential
// again. It answers the sign-in page itself (401) when there is none.
func (c *Console) authenticate(w http.ResponseWriter, r *http.Request) (request, bool) {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		c.signinAgain(w, r, "Sign in to use the console.")
		return request{}, false
	}
	// The tables' polling is not a use: a tab left open still expires.
	s, ok, expired, err := c.sess.get(r.Context(), ck.Value, !strings.HasPrefix(r.URL.Path, "/live/"))
	if err != nil {
		c.log.Error("read console session", "err", err)
		c.render(w, r, http.StatusServiceUnavailable, "error", &view{Title: "Unavailable",
			Error: "The console's sessions could not be read just now; try again. Nothing was changed."})
		return request{}, false
	}
	if !ok {
		msg := "Your console session is unknown or has ended; sign in again."
		if expired {
			msg = fmt.Sprintf("Your console session expired after %s without use; sign in again.", c.o.IdleTimeout)
		}
		if r.Method == http.MethodPost {
			msg += " Nothing was changed."
		}
		setCookie(w, r, c.o.PublicURL, "", -1)
		c.signinAgain(w, r, msg)
		return request{}, false
	}
	p, err := c.sessionPrincipal(r.Context(), s)
	if err != nil {
		if e := supervisor.AsError(err); e.Status >= 500 {
			c.log.Error("check a console session's key", "err", err)
			c.render(w, r, e.Status, "error", &view{Title: "Unavailable",
				Error: "The session's key could not be checked just now; try again. Nothing was changed."})
			return request{}, false
		}
		if err := c.sess.remove(r.Context(), s); err != nil {
			c.log.Warn("remove a console session", "err", err)
		}
		setCookie(w, r, c.o.PublicURL, "", -1)
		c.signinAgain(w, r, "Your key is no longer accepted ("+supervisor.AsError(err).Message+"); sign in again.")
		return request{}, false
	}
	s.p = p
	r = r.WithContext(supervisor.WithPrincipal(r.Context(), p))
	return request{Request: r, s: s}, true
}

// page serves fn to signed-in sessions.
func (c *Console) page(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q, ok := c.authenticate(w, r); ok {
			fn(w, q)
		}
	})
}

// post serves fn to signed-in sessions for a same-origin form post with
// the session's CSRF token; it refuses anything else with nothing done.
func (c *Console) post(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r, c.o.PublicURL) {
			c.render(w, r, http.StatusForbidden, "error", &view{Title: "Refused",
				Error: "This form was posted from another site; the console only takes forms from its own pages. Nothing was changed."})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.render(w, r, http.StatusBadRequest, "error", &view{Title: "Bad form", Error: "The form could not be read (at most 64 KB). Nothing was changed."})
			return
		}
		q, ok := c.authenticate(w, r)
		if !ok {
			return
		}
		if !validCSRF(q.s, r.PostForm.Get("csrf")) {
			v := q.view("Refused", "", nil)
			v.Error = "The form's security token is missing or wrong (reload the page and try again). Nothing was changed."
			c.render(w, r, http.StatusForbidden, "error", v)
			return
		}
		fn(w, q)
	})
}

// principal checks a token or key as the API does.
// sessionPrincipal checks again what session x signed in with: the
// operator token it signed in with is still SUPERVISOR_TOKEN, or its key
// is still good (not revoked, expired or deleted).
func (c *Console) sessionPrincipal(ctx context.Context, x session) (supervisor.Principal, error) {
	if x.actor != supervisor.ActorOperator {
		return c.svc.KeyPrincipal(ctx, x.actor)
	}
	if c.o.Token == "" || !secureEqual(x.mark, operatorMark(c.o.Token)) {
		return supervisor.Principal{}, &supervisor.Error{Status: http.StatusUnauthorized, Code: supervisor.CodeUnauthorized,
			Message: "the operator token it signed in with is no longer SUPERVISOR_TOKEN"}
	}
	return supervisor.Operator, nil
}

func (c *Console) principal(ctx context.Context, secret string) (supervisor.Principal, error) {
	if c.o.Token != "" && len(secret) == len(c.o.Token) && secureEqual(secret, c.o.Token) {
		return supervisor.Operator, nil
	}
	return c.svc.Authenticate(ctx, secret)
}

// signinAgain shows the sign-in page with msg (401).
func (c *Console) signinAgain(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Method == http.MethodGet && r.URL.Path != "/signin" && !strings.HasPrefix(r.URL.Path, "/live/") {
		// A plain page view: straight to the form, with the reason.
		c.render(w, r, http.StatusUnauthorized, "signin", &view{Title: "Sign in", Error: msg, Data: signinData{Next: r.URL.Path}})
		return
	}
	c.render(w, r, http.StatusUnauthorized, "signin", &view{Title: "Sign in", Error: msg})
}

type signinData struct{ Next string }

func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "signin", &view{Title: "Sign in"})
}

func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r, c.o.PublicURL) {
		c.render(w, r, http.StatusForbidden, "signin", &view{Title: "Sign in", Error: "This sign-in was posted from another site; it was refused."})
		return
	}
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	if ok, wait := c.signins.Take(addr); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
		c.render(w, r, http.StatusTooManyRequests, "signin", &view{Title: "Sign in",
			Error: fmt.Sprintf("Too many sign-in attempts from this address: at most %d a minute. Try again in %d s.", SigninBurst, max(1, int(math.Ceil(wait.Seconds()))))})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.render(w, r, http.StatusBadRequest, "signin", &view{Title: "Sign in", Error: "The form could not be read."})
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("key"))
	if secret == "" {
		c.render(w, r, http.StatusBadRequest, "signin", &view{Title: "Sign in", Error: "Key: enter the operator token (SUPERVISOR_TOKEN) or an operator or workspace API key."})
		return
	}
	p, err := c.principal(r.Context(), secret)
	if err != nil {
		e := supervisor.AsError(err)
		if e.Status >= 500 {
			c.log.Error("sign in", "err", err)
			c.render(w, r, e.Status, "signin", &view{Title: "Sign in", Error: "The key could not be checked just now; try again."})
			return
		}
		c.render(w, r, http.StatusUnauthorized, "signin", &view{Title: "Sign in", Error: "Wrong key: " + e.Message + "."})
		return
	}
	if p.Scope == store.ScopeAgent {
		c.render(w, r, http.StatusForbidden, "signin", &view{Title: "Sign in",
			Error: "Agent keys cannot sign in to the console: they only use their agent's computer. Use the operator token or an operator or workspace key."})
		return
	}
	s, err := c.sess.create(r.Context(), p)
	if err != nil {
		c.log.Error("record a console session", "err", err)
		c.render(w, r, http.StatusServiceUnavailable, "signin", &view{Title: "Sign in", Error: "The session could not be recorded just now; try again."})
		return
	}
	setCookie(w, r, c.o.PublicURL, s.id, 0)
	c.log.Info("signed in", "actor", p.Actor, "scope", p.Scope)
	next := r.PostForm.Get("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		next = "/computers"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) signout(w http.ResponseWriter, q request) {
	if err := c.sess.remove(q.ctx(), q.s); err != nil {
		c.log.Error("sign out", "err", err)
		c.render(w, q.Request, http.StatusServiceUnavailable, "error", &view{Title: "Unavailable",
			Error: "Signing out failed just now; try again."})
		return
	}
	setCookie(w, q.Request, c.o.PublicURL, "", -1)
	c.render(w, q.Request, http.StatusOK, "signin", &view{Title: "Sign in", Flash: "You are signed out."})
}

// render executes a page's template into a buffer, then writes it, so
// that a failing template never leaves half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	if v.Signed {
		ws := ""
		if p := supervisor.PrincipalOf(r.Context()); p.Scope == store.ScopeWorkspace {
			ws = p.Workspace
		}
		if xs, err := c.svc.Attention(r.Context(), ws); err == nil {
			v.Attention = len(xs)
		}
	}
	var buf bytes.Buffer
	if err := c.tmpl[page].Execute(&buf, v); err != nil {
		c.log.Error("render", "page", page, "err", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail shows the Service's answer on the page the form came from.
func (c *Console) fail(w http.ResponseWriter, q request, err error, again func(w http.ResponseWriter, q request, status int, msg string)) {
	e := supervisor.AsError(err)
	if e.Status >= 500 {
		c.log.Error("console action failed", "path", q.URL.Path, "status", e.Status, "err", err)
	}
	again(w, q, e.Status, e.Message+". Nothing was changed.")
}

// done leaves msg for the next page and sends the browser to it.
func (c *Console) done(w http.ResponseWriter, q request, to, msg string) {
	if err := c.sess.setFlash(q.ctx(), q.s, msg); err != nil {
		c.log.Warn("leave a message for the next page", "err", err)
	}
	http.Redirect(w, q.Request, to, http.StatusSeeOther)
}

// inWorkspace refuses, as the API does (404), an agent outside the
// workspace the session is limited to.
func (c *Console) inWorkspace(q request, agent string) error {
	ws, err := c.svc.AgentWorkspace(q.ctx(), agent)
	if err != nil {
		return err
	}
	if w := q.workspace(); w != "" && ws != w {
		return &supervisor.Error{Status: http.StatusNotFound, Code: supervisor.CodeNotFound, Message: fmt.Sprintf("agent %q does not exist", agent)}
	}
	return nil
}

// etag answers 304 when the client has body already; otherwise it sets
// the ETag and reports false.
func etag(w http.ResponseWriter, r *http.Request, body []byte) bool {
	sum := sha256.Sum256(body)
	tag := `"` + hex.EncodeToString(sum[:12]) + `"`
	w.Header().Set("ETag", tag)
	if r.Header.Get("If-None-Match") == tag {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

// providerIDs returns the configured providers, sorted.
func (c *Console) providerIDs() []string { return slices.Sorted(maps.Keys(c.o.Providers)) }

var stateText = map[string]string{
	store.StateStarting:      "Starting",
	store.StateRunning:       "Running",
	store.StateStopping:      "Stopping",
	store.StateStopped:       "Stopped",
	store.StateExpired:       "Expired",
	store.StateUncertain:     "Uncertain: needs attention",
	store.StateCleanupFailed: "Cleanup failed: needs attention",
}

func (c *Console) when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// duration writes seconds as 1 h 02 min, 5 min 03 s or 12 s.
func duration(sec any) string {
	var s int64
	switch v := sec.(type) {
	case int:
		s = int64(v)
	case int64:
		s = v
	}
	switch {
	case s >= 3600:
		return fmt.Sprintf("%d h %02d min", s/3600, s%3600/60)
	case s >= 60:
		return fmt.Sprintf("%d min %02d s", s/60, s%60)
	}
	return fmt.Sprintf("%d s", s)
}

// left writes a session's time left to the minute, so that the live
// table changes once a minute, not every second.
func left(sec int) string {
	if sec <= 0 {
		return "none"
	}
	if sec < 60 {
		return "under 1 min"
	}
	return fmt.Sprintf("about %d min", (sec+59)/60)
}
