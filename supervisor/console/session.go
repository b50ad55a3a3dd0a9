package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// CookieName is the console's session cookie.
const CookieName = "berth_console"

// DefaultIdleTimeout ends a console session not used for this long.
const DefaultIdleTimeout = 12 * time.Hour

// touchEvery is how often a session's use is written to the store: its
// idle time is counted to within this.
const touchEvery = time.Minute

// purgeEvery is how often a sign-in also removes the sessions that idled
// past the timeout.
const purgeEvery = time.Minute

// session is one signed-in browser, as one request sees it. The store
// keeps it (store.ConsoleSessions), so every supervisor sharing the store
// serves it: the hash of its cookie, its CSRF token, and who signed in,
// never the key itself.
type session struct {
	id   string // the cookie's value
	hash string // its SHA-256, the store's key
	csrf string
	p    supervisor.Principal
	// flash is a message shown once, on this page.
	flash string
	actor string // the key's id, or the operator
	mark  string // for the operator: operatorMark of the token
}

// sessions reads and writes the console's sessions in the store.
type sessions struct {
	st    store.ConsoleSessions
	clk   clock.Clock
	idle  time.Duration
	token string // SUPERVISOR_TOKEN

	mu        sync.Mutex
	lastPurge time.Time
}

func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashID is the store's key of a session id.
func hashID(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// operatorMark is what the store keeps of the operator token a session
// signed in with: a new SUPERVISOR_TOKEN ends the sessions of the old one.
func operatorMark(token string) string {
	h := sha256.Sum256([]byte("berth console operator\x00" + token))
	return hex.EncodeToString(h[:])
}

// create starts a session for p and records it.
func (s *sessions) create(ctx context.Context, p supervisor.Principal) (*session, error) {
	now := s.clk.Now()
	s.mu.Lock()
	purge := now.Sub(s.lastPurge) >= purgeEvery
	if purge {
		s.lastPurge = now
	}
	s.mu.Unlock()
	if purge {
		if _, err := s.st.PurgeConsoleSessions(ctx, now.Add(-s.idle)); err != nil {
			return nil, err
		}
	}
	x := &session{id: randomID(), csrf: randomID(), p: p, actor: p.Actor}
	x.hash = hashID(x.id)
	if p.Actor == supervisor.ActorOperator {
		x.mark = operatorMark(s.token)
	}
	err := s.st.AddConsoleSession(ctx, store.ConsoleSession{IDHash: x.hash, CSRF: x.csrf, Actor: x.actor, OperatorMark: x.mark,
		CreatedAt: now.UTC(), LastUsed: now.UTC()})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// get returns the session of id, recording the use when touch is set;
// expired is true when the session existed but was idle too long (it is
// then removed). A message left for the session is taken.
func (s *sessions) get(ctx context.Context, id string, touch bool) (x session, ok, expired bool, err error) {
	now := s.clk.Now()
	hash := hashID(id)
	rec, err := s.st.GetConsoleSession(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return session{}, false, false, nil
	}
	if err != nil {
		return session{}, false, false, err
	}
	if now.Sub(rec.LastUsed) >= s.idle {
		return session{}, false, true, s.st.DeleteConsoleSession(ctx, hash)
	}
	if touch && now.Sub(rec.LastUsed) >= touchEvery {
		if err := s.st.TouchConsoleSession(ctx, hash, now.UTC()); err != nil {
			return session{}, false, false, err
		}
	}
	if rec.Flash != "" {
		if err := s.st.SetConsoleFlash(ctx, hash, ""); err != nil {
			return session{}, false, false, err
		}
	}
	return session{id: id, hash: hash, csrf: rec.CSRF, flash: rec.Flash, actor: rec.Actor, mark: rec.OperatorMark}, true, false, nil
}

// setFlash leaves msg for the session's next page.
func (s *sessions) setFlash(ctx context.Context, x session, msg string) error {
	return s.st.SetConsoleFlash(ctx, x.hash, msg)
}

func (s *sessions) remove(ctx context.Context, x session) error {
	return s.st.DeleteConsoleSession(ctx, x.hash)
}

// validCSRF compares a form's token with the session's in constant time.
func validCSRF(x session, got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(x.csrf)) == 1
}

// sameOrigin refuses what a browser marks as sent from another site, or
// with an Origin that is neither the page's own nor public's (the
// supervisor's public URL, when TLS ends at a proxy before it).
func sameOrigin(r *http.Request, public string) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if origin == scheme+"://"+r.Host {
		return true
	}
	u, err := url.Parse(public)
	return err == nil && u.Scheme != "" && u.Host != "" && origin == u.Scheme+"://"+u.Host
}

// setCookie sets the session cookie: Secure when the request came over
// TLS, or the supervisor's public URL is https.
func setCookie(w http.ResponseWriter, r *http.Request, public, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: value, Path: "/", HttpOnly: true, Secure: r.TLS != nil || strings.HasPrefix(public, "https://"),
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge,
	})
}
