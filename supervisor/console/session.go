package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/supervisor"
)

// CookieName is the console's session cookie.
const CookieName = "berth_console"

// DefaultIdleTimeout ends a console session not used for this long.
const DefaultIdleTimeout = 12 * time.Hour

// maxSessions bounds the sessions kept in memory; the least recently used
// one goes first.
const maxSessions = 10000

// session is one signed-in browser. It lives in this process's memory
// only: a restart signs everyone out.
type session struct {
	id   string
	csrf string
	// secret is what the session signed in with (the operator token or an
	// API key), checked again on every request so that a revoked or
	// expired key ends its sessions at once. It never leaves memory.
	secret string
	p      supervisor.Principal
	last   time.Time
	// flash is a message shown once on the next page.
	flash string
}

// sessions keeps the signed-in browsers.
type sessions struct {
	clk  clock.Clock
	idle time.Duration
	mu   sync.Mutex
	m    map[string]*session
}

func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for p.
func (s *sessions) create(p supervisor.Principal, secret string) *session {
	now := s.clk.Now()
	x := &session{id: randomID(), csrf: randomID(), secret: secret, p: p, last: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, y := range s.m {
		if now.Sub(y.last) >= s.idle {
			delete(s.m, id)
		}
	}
	if len(s.m) >= maxSessions {
		var oldest *session
		for _, y := range s.m {
			if oldest == nil || y.last.Before(oldest.last) {
				oldest = y
			}
		}
		delete(s.m, oldest.id)
	}
	s.m[x.id] = x
	return x
}

// get returns the session of id, marking it used when touch is set;
// expired is true when the session existed but was idle too long (it is
// then removed).
func (s *sessions) get(id string, touch bool) (x session, ok, expired bool) {
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	y, ok := s.m[id]
	if !ok {
		return session{}, false, false
	}
	if now.Sub(y.last) >= s.idle {
		delete(s.m, id)
		return session{}, false, true
	}
	if touch {
		y.last = now
	}
	x = *y
	y.flash = ""
	return x, true, false
}

// setFlash leaves msg for the session's next page.
func (s *sessions) setFlash(id, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if y, ok := s.m[id]; ok {
		y.flash = msg
	}
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
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
