package supervisor

import (
	"context"
	"crypto/hmac"
	"errors"
	"net/http"
	pathpkg "path"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/supervisor/store"
)

// Port previews. Preview hands out a URL under PreviewPath that reaches
// one port inside the agent's running computer: /p/{token}/..., where
// the token names the session, the port and the session's end, signed
// with the supervisor's secret. The supervisor passes each request on
// through computerd (computerd.PortsPath), the same link every tool call
// takes, so previews work on every provider that runs computerd.
//
// What such a URL can reach is only that port:
//   - the path after the token is resolved inside the port's root, so no
//     "..", encoded or not, leads anywhere else;
//   - the token is refused once the session is no longer running, or at
//     the session's end as it was when the link was issued;
//   - the pages are served with a sandbox Content-Security-Policy, so
//     that their scripts run in an origin of their own and cannot use the
//     supervisor's origin (its cookies, its API) even though they share
//     its host; no Referer carries the token away; the supervisor's own
//     cookies (named berth...) are neither passed to the computer nor set
//     by it.
//
// Path-based previews serve apps whose links are relative; an app that
// links to absolute paths ("/static/app.js") needs a host of its own.
const PreviewPath = "/p/"

// previewSessionTTL is how long a preview trusts what it read of its
// session: a stopped session's links stop working within it.
const previewSessionTTL = time.Second

// previewCSP sandboxes previewed pages into an origin of their own.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// Preview returns a URL, under base (the supervisor's URL as the caller
// reaches it), to port inside the agent's running computer, valid while
// this session runs.
func (s *Service) Preview(ctx context.Context, agent, port, base string) (api.Preview, error) {
	p, err := computerd.ParsePort(port)
	if err != nil {
		return api.Preview{}, badRequest("%v", err)
	}
	x, err := s.running(ctx, agent)
	if err != nil {
		return api.Preview{}, err
	}
	exp := x.ExpiresAt.UTC().Truncate(time.Second)
	return api.Preview{
		URL:       strings.TrimRight(base, "/") + PreviewPath + s.previewToken(x.ID, p, exp) + "/",
		Port:      p,
		ExpiresAt: exp,
	}, nil
}

func (s *Service) previewToken(session string, port int, exp time.Time) string {
	body := session + "." + strconv.Itoa(port) + "." + strconv.FormatInt(exp.Unix(), 10)
	return body + "." + s.cfg.Tokens.Derive(token.Preview, body)
}

// previewLink is what a valid token says.
type previewLink struct {
	session string
	port    int
	exp     time.Time
}

func (s *Service) readPreviewToken(tok string) (previewLink, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || len(tok) > 256 {
		return previewLink{}, false
	}
	body := strings.Join(parts[:3], ".")
	if !hmac.Equal([]byte(parts[3]), []byte(s.cfg.Tokens.Derive(token.Preview, body))) {
		return previewLink{}, false
	}
	port, err := computerd.ParsePort(parts[1])
	if err != nil {
		return previewLink{}, false
	}
	sec, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return previewLink{}, false
	}
	return previewLink{session: parts[0], port: port, exp: time.Unix(sec, 0)}, true
}

// cachedSession is a session as a preview last read it.
type cachedSession struct {
	x  store.Session
	at time.Time
}

// previewSession returns the link's session if it runs, woken.
func (s *Service) previewSession(ctx context.Context, id string) (store.Session, error) {
	now := s.clk.Now()
	if v, ok := s.previews.Load(id); ok {
		if c := v.(cachedSession); now.Sub(c.at) < previewSessionTTL {
			return c.x, nil
		}
	}
	x, err := s.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (x.State != store.StateRunning || !now.Before(x.ExpiresAt))) {
		s.previews.Delete(id)
		return x, errorf(http.StatusGone, CodeNoSession, "the session this preview link belongs to has ended")
	}
	if err != nil {
		return x, err
	}
	if x, err = s.woken(ctx, x); err != nil {
		return x, err
	}
	s.previews.Store(id, cachedSession{x: x, at: now})
	return x, nil
}

// forgetPreviews drops cached sessions that are stale.
func (s *Service) forgetPreviews(now time.Time) {
	s.previews.Range(func(k, v any) bool {
		if now.Sub(v.(cachedSession).at) >= previewSessionTTL {
			s.previews.Delete(k)
		}
		return true
	})
}

// ServePreview serves the URLs Preview hands out (every path under
// PreviewPath). The token is the credential: no API key is asked for.
func (s *Service) ServePreview(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Robots-Tag", "noindex")
	fail := func(e *Error) { httpjson.WriteError(w, e.Status, e.Code, e.Message) }
	tok, rest, slash := strings.Cut(strings.TrimPrefix(r.URL.Path, PreviewPath), "/")
	link, ok := s.readPreviewToken(tok)
	if !ok || !s.clk.Now().Before(link.exp) {
		fail(errorf(http.StatusNotFound, CodeNotFound, "this preview link is not valid, or has expired"))
		return
	}
	if !slash {
		// Relative links resolve against the folder: go to it.
		http.Redirect(w, r, PreviewPath+tok+"/", http.StatusFound)
		return
	}
	x, err := s.previewSession(r.Context(), link.session)
	if err != nil {
		fail(AsError(err))
		return
	}
	c, err := s.client(r.Context(), x)
	if err != nil {
		fail(AsError(err))
		return
	}
	// Resolve the rest inside the port's root; keep a final slash.
	clean := pathpkg.Clean("/" + rest)
	if strings.HasSuffix(rest, "/") && clean != "/" {
		clean += "/"
	}
	out := r.Clone(r.Context())
	out.URL.Path, out.URL.RawPath = clean, ""
	out.Header.Del("Authorization")
	dropOwnCookies(out.Header)
	h.Set("Content-Security-Policy", previewCSP)
	rp := c.PortProxy(link.port, func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil {
			s.log.Info("port preview failed", "session", x.ID, "port", link.port, "err", err)
		}
		fail(errorf(http.StatusBadGateway, CodeProvider, "the computer did not answer for port %d: %v", link.port, err))
	})
	rp.ModifyResponse = func(resp *http.Response) error {
		keepForeignCookies(resp.Header)
		return nil
	}
	rp.ServeHTTP(w, out)
}

// ownCookie reports whether a cookie name is the supervisor's.
func ownCookie(name string) bool { return strings.HasPrefix(strings.ToLower(name), "berth") }

// dropOwnCookies removes the supervisor's cookies from a request.
func dropOwnCookies(h http.Header) {
	r := http.Request{Header: h}
	cookies := r.Cookies()
	h.Del("Cookie")
	var kept []string
	for _, c := range cookies {
		if !ownCookie(c.Name) {
			kept = append(kept, c.String())
		}
	}
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// keepForeignCookies removes Set-Cookie lines that would set one of the
// supervisor's cookies.
func keepForeignCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, l := range lines {
		name, _, _ := strings.Cut(strings.TrimSpace(l), "=")
		if !ownCookie(strings.TrimSpace(name)) {
			h.Add("Set-Cookie", l)
		}
	}
}
