// Package liveview is the supervisor's side of live view: it issues
// short-lived view tokens for a desktop session, serves the viewer page,
// and signals between the viewer's browser and the computer's streamer,
// handing each side its own TURN credentials. It also enforces how many
// viewers may use one computer's desktop at once, with seats kept in the
// store, so that every supervisor sharing a store counts the same seats.
package liveview

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/relay/turnserver"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// CodeDesktopBusy is the 409 answered when a desktop already has as many
// viewers as DesktopUsers allows.
const CodeDesktopBusy = supervisor.CodeDesktopBusy

// CodeNotDesktop is the 409 answered for a session without a screen.
const CodeNotDesktop = "not_desktop"

// Defaults of Config.
const (
	DefaultDesktopUsers = 2
	DefaultTokenTTL     = 2 * time.Minute
	MaxTokenTTL         = 10 * time.Minute
	turnTTL             = turnserver.MaxTTL
)

// Config wires a Manager.
type Config struct {
	Store  store.Store
	Tokens *token.Deriver
	// Transport returns the client and headers that reach a session's
	// computerd: straight, or through its provider's transport with the
	// connection's credentials (the Service's ComputerTransport). Nil
	// reaches every computerd straight with HTTPClient.
	Transport func(ctx context.Context, x store.Session) (*http.Client, http.Header, error)
	// HTTPClient reaches computerd when Transport is nil (default: a
	// client with its own pool).
	HTTPClient *http.Client
	// TURNSecret is TURN_SECRET, shared with the TURN server.
	TURNSecret []byte
	// ViewerTURN are the TURN URLs viewers' browsers use, e.g.
	// turn:HOST:3478?transport=udp, turn:HOST:3478?transport=tcp and
	// turns:HOST:5349?transport=tcp.
	ViewerTURN []string
	// DesktopUsers is DESKTOP_USERS: how many viewers (people or agents)
	// may use one computer's desktop at once (default DefaultDesktopUsers).
	DesktopUsers int
	// TokenTTL is how long a view token lives; the viewer page renews it
	// while it stays open (default DefaultTokenTTL, at most MaxTokenTTL).
	TokenTTL time.Duration
	// PublicURL is the supervisor's URL as browsers reach it; when empty,
	// the URL a viewer link is requested on is used.
	PublicURL string
	Clock     clock.Clock
	Logger    *slog.Logger
}

// Manager issues view tokens and serves the viewer page and signalling.
type Manager struct {
	cfg Config
	log *slog.Logger
	key []byte
	mux *http.ServeMux
}

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Tokens == nil {
		return nil, errors.New("liveview: Store and Tokens are required")
	}
	if len(cfg.TURNSecret) < 16 {
		return nil, turnserver.ErrBadSecret
	}
	if len(cfg.ViewerTURN) == 0 {
		return nil, errors.New("liveview: ViewerTURN needs at least one turn: URL")
	}
	cfg.DesktopUsers = cmp.Or(cfg.DesktopUsers, DefaultDesktopUsers)
	cfg.TokenTTL = cmp.Or(cfg.TokenTTL, DefaultTokenTTL)
	if cfg.TokenTTL > MaxTokenTTL {
		return nil, fmt.Errorf("liveview: view token TTL %v is over %v", cfg.TokenTTL, MaxTokenTTL)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger.With("component", "liveview"),
		key: []byte(cfg.Tokens.Derive(token.View, "view-tokens")),
		mux: http.NewServeMux(),
	}
	m.mux.HandleFunc("GET /view/{session}", m.page)
	m.mux.HandleFunc("GET /view/{session}/owner", m.owner)
	m.mux.HandleFunc("POST /view/{session}/config", m.config)
	m.mux.HandleFunc("POST /view/{session}/offer", m.offer)
	m.mux.HandleFunc("POST /view/{session}/renew", m.renew)
	m.mux.HandleFunc("POST /view/{session}/leave", m.leave)
	return m, nil
}

// Handler serves /view/...: the page and its signalling, authorized by the
// view token in the query, not by the operator token.
func (m *Manager) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		m.mux.ServeHTTP(w, r)
	})
}

// Grant is the answer of POST /v1/agents/{agent}/computer/view.
type Grant struct {
	Session   string    `json:"session"`
	Viewer    string    `json:"viewer"`
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
	// DesktopUsers is the limit of viewers at once; Viewers how many seats
	// are taken, this one included.
	DesktopUsers int `json:"desktopUsers"`
	Viewers      int `json:"viewers"`
}

// Issue makes a view token for the agent's running desktop session and
// starts its encoder, so that it is warm when the page connects. base is
// the supervisor's URL as the caller reached it.
func (m *Manager) Issue(ctx context.Context, agent, base string) (Grant, error) {
	x, err := m.cfg.Store.LiveSession(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		return Grant{}, &supervisor.Error{Status: http.StatusConflict, Code: supervisor.CodeNoSession,
			Message: fmt.Sprintf("agent %q has no running computer; call computer_start first", agent)}
	}
	if err != nil {
		return Grant{}, err
	}
	if err := m.viewable(x); err != nil {
		return Grant{}, err
	}
	g, err := m.seat(ctx, x)
	if err != nil {
		return Grant{}, err
	}
	base = strings.TrimRight(cmp.Or(m.cfg.PublicURL, base), "/")
	g.URL = base + g.URL
	m.log.Info("view granted", "agent", agent, "session", x.ID, "viewer", g.Viewer, "viewers", g.Viewers)
	return g, nil
}

// seat takes a viewer's seat at the session's desktop, within
// DesktopUsers counted across every supervisor of the store, and warms its
// encoder. The grant's URL is the viewer page's path and query, without
// the supervisor's base.
func (m *Manager) seat(ctx context.Context, x store.Session) (Grant, error) {
	now := m.cfg.Clock.Now()
	viewer := newViewerID()
	exp := now.Add(m.cfg.TokenTTL)
	n, err := m.cfg.Store.TakeSeat(ctx, x.ID, viewer, exp, now, m.cfg.DesktopUsers)
	var full *store.SeatsFullError
	switch {
	case errors.As(err, &full):
		return Grant{}, &supervisor.Error{Status: http.StatusConflict, Code: CodeDesktopBusy,
			Message: fmt.Sprintf("the desktop of session %s already has %d viewers (DESKTOP_USERS is %d); try again when one leaves", x.ID, full.Held, m.cfg.DesktopUsers)}
	case errors.Is(err, store.ErrNotFound):
		return Grant{}, &supervisor.Error{Status: http.StatusConflict, Code: supervisor.CodeNoSession,
			Message: fmt.Sprintf("session %s has ended", x.ID)}
	case err != nil:
		m.log.Warn("take a viewer seat", "session", x.ID, "err", err)
		return Grant{}, err
	}

	go m.warm(x)
	tok := m.sign(x.ID, viewer, exp)
	u := "/view/" + url.PathEscape(x.ID) + "?token=" + url.QueryEscape(tok)
	return Grant{Session: x.ID, Viewer: viewer, Token: tok, URL: u, ExpiresAt: exp.UTC(), DesktopUsers: m.cfg.DesktopUsers, Viewers: n}, nil
}

// Screenshot returns a PNG of the agent's running desktop, for previews.
func (m *Manager) Screenshot(ctx context.Context, agent string) ([]byte, error) {
	x, err := m.cfg.Store.LiveSession(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &supervisor.Error{Status: http.StatusConflict, Code: supervisor.CodeNoSession,
			Message: fmt.Sprintf("agent %q has no running computer; call computer_start first", agent)}
	}
	if err != nil {
		return nil, err
	}
	if err := m.viewable(x); err != nil {
		return nil, err
	}
	c, err := m.desktopClient(ctx, x)
	if err != nil {
		return nil, err
	}
	png, err := c.Screenshot(ctx)
	if err != nil {
		m.log.Warn("screenshot", "session", x.ID, "err", err)
		return nil, &supervisor.Error{Status: http.StatusBadGateway, Code: supervisor.CodeProvider, Message: "the computer did not answer with a screenshot; retrying may help"}
	}
	return png, nil
}

// viewable checks that a session is a running desktop reachable for
// signalling.
func (m *Manager) viewable(x store.Session) error {
	if x.State != store.StateRunning {
		return &supervisor.Error{Status: http.StatusConflict, Code: supervisor.CodeNoSession,
			Message: fmt.Sprintf("session %s is %s, not running", x.ID, x.State)}
	}
	if !m.cfg.Clock.Now().Before(x.ExpiresAt) {
		return &supervisor.Error{Status: http.StatusConflict, Code: supervisor.CodeNoSession,
			Message: fmt.Sprintf("session %s expired at %s", x.ID, x.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	if x.Image != providers.ImageDesktop {
		return &supervisor.Error{Status: http.StatusConflict, Code: CodeNotDesktop,
			Message: fmt.Sprintf("session %s runs the %q image, which has no screen; connect with \"image\": \"desktop\" for live view", x.ID, x.Image)}
	}
	return nil
}

// desktopClient reaches the session's computerd with the computer's token,
// through Config.Transport.
func (m *Manager) desktopClient(ctx context.Context, x store.Session) (*desktop.Client, error) {
	if m.cfg.Transport == nil {
		var h http.Header
		if x.Header != "" {
			json.Unmarshal([]byte(x.Header), &h)
		}
		return desktop.NewClient(x.Endpoint, m.cfg.Tokens.Derive(token.Computer, x.ComputerID), m.cfg.HTTPClient, h), nil
	}
	hc, h, err := m.cfg.Transport(ctx, x)
	if err != nil {
		return nil, err
	}
	return desktop.NewClient(x.Endpoint, m.cfg.Tokens.Derive(token.Computer, x.ComputerID), hc, h), nil
}

// owner serves a desktop session's owner link (lending.OwnerViewKey): it
// takes a seat like any viewer link, within DesktopUsers, and redirects to
// the viewer page with a view token of its own. The lending agent gives
// this link to the machine's owner, who watches without an operator token.
func (m *Manager) owner(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fail := func(err error) {
		e := supervisor.AsError(err)
		w.WriteHeader(e.Status)
		fmt.Fprintln(w, e.Message)
	}
	session := r.PathValue("session")
	x, err := m.cfg.Store.GetSession(r.Context(), session)
	if errors.Is(err, store.ErrNotFound) {
		fail(&supervisor.Error{Status: http.StatusForbidden, Code: supervisor.CodeUnauthorized, Message: "owner link: no such session, or a wrong key"})
		return
	}
	if err != nil {
		fail(err)
		return
	}
	want := lending.OwnerViewKey(m.cfg.Tokens.Derive(token.Computer, x.ComputerID), x.ID)
	if key := r.URL.Query().Get("key"); !hmac.Equal([]byte(key), []byte(want)) {
		m.log.Warn("owner link refused: wrong key", "session", session)
		fail(&supervisor.Error{Status: http.StatusForbidden, Code: supervisor.CodeUnauthorized, Message: "owner link: no such session, or a wrong key"})
		return
	}
	if err := m.viewable(x); err != nil {
		fail(err)
		return
	}
	g, err := m.seat(r.Context(), x)
	if err != nil {
		fail(err)
		return
	}
	m.log.Info("view granted to the machine's owner", "session", x.ID, "viewer", g.Viewer, "viewers", g.Viewers)
	http.Redirect(w, r, g.URL, http.StatusSeeOther)
}

func (m *Manager) warm(x store.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := m.desktopClient(ctx, x)
	if err == nil {
		_, err = c.Warm(ctx, desktop.WarmRequest{})
	}
	if err != nil {
		m.log.Warn("warm the encoder", "session", x.ID, "err", err)
	}
}

// sign makes a view token: "v1.<session>.<viewer>.<expiry>.<mac>".
func (m *Manager) sign(session, viewer string, exp time.Time) string {
	payload := "v1." + base64.RawURLEncoding.EncodeToString([]byte(session)) + "." + viewer + "." + strconv.FormatInt(exp.Unix(), 10)
	mac := hmac.New(sha256.New, m.key)
	mac.Write([]byte(payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// check verifies a view token for the session named in the path and
// returns its viewer. A token of another session, an expired one, a forged
// one and one whose viewer left (or whose seat lapsed) are all refused.
func (m *Manager) check(ctx context.Context, session, tok string) (string, time.Time, error) {
	refused := func(why string) (string, time.Time, error) {
		return "", time.Time{}, &supervisor.Error{Status: http.StatusForbidden, Code: supervisor.CodeUnauthorized, Message: "view token: " + why}
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 5 || parts[0] != "v1" {
		return refused("missing or malformed (open the link from POST /v1/agents/{agent}/computer/view)")
	}
	payload := strings.Join(parts[:4], ".")
	mac := hmac.New(sha256.New, m.key)
	mac.Write([]byte(payload))
	got, err := base64.RawURLEncoding.DecodeString(parts[4])
	if err != nil || !hmac.Equal(got, mac.Sum(nil)) {
		return refused("not issued by this supervisor")
	}
	s, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if string(s) != session {
		return refused("issued for another session")
	}
	sec, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return refused("malformed expiry")
	}
	exp := time.Unix(sec, 0)
	now := m.cfg.Clock.Now()
	if !now.Before(exp) {
		return refused("expired; ask for a new link")
	}
	viewer := parts[2]
	seated, err := m.cfg.Store.Seated(ctx, session, viewer, now)
	if err != nil {
		m.log.Warn("look up a viewer seat", "session", session, "viewer", viewer, "err", err)
		return "", time.Time{}, err
	}
	if !seated {
		return refused("this viewer has left; ask for a new link")
	}
	return viewer, exp, nil
}

func newViewerID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "w" + hex.EncodeToString(b)
}
