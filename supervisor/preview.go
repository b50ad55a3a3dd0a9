package supervisor

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
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
// With a preview domain (Config.PreviewDomain, PREVIEW_DOMAIN) each link
// is a host of its own instead, {port}-{session}-{end}-{signature}.{domain},
// whose whole path is the app's: the page runs in that host's origin, so
// it is not sandboxed; a cookie it sets is kept to that host (its Domain
// attribute is removed), so no preview sets cookies for another host.
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
	u := strings.TrimRight(base, "/") + PreviewPath + s.previewToken(x.ID, p, exp) + "/"
	if d := s.cfg.PreviewDomain; d != "" {
		b, err := url.Parse(base)
		if err != nil || b.Host == "" {
			return api.Preview{}, errorf(http.StatusInternalServerError, CodeInternal, "the supervisor's URL %q has no host for a preview link", base)
		}
		host := s.previewLabel(x.ID, p, exp) + "." + d
		if port := b.Port(); port != "" {
			host = net.JoinHostPort(host, port)
		}
		u = b.Scheme + "://" + host + "/"
	}
	return api.Preview{URL: u, Port: p, ExpiresAt: exp}, nil
}

// previewLabel is the host label of a link on the preview domain: the
// port, the session id without its "s_", the end in base 36 and 80 bits
// of the signature in hex, all lower case as host names are.
func (s *Service) previewLabel(session string, port int, exp time.Time) string {
	body := strconv.Itoa(port) + "-" + strings.TrimPrefix(session, "s_") + "-" + strconv.FormatInt(exp.Unix(), 36)
	return body + "-" + s.labelMAC(body)
}

func (s *Service) labelMAC(body string) string {
	raw, _ := base64.RawURLEncoding.DecodeString(s.cfg.Tokens.Derive(token.Preview, "host:"+body))
	return hex.EncodeToString(raw[:10])
}

func (s *Service) readPreviewLabel(label string) (previewLink, bool) {
	parts := strings.Split(label, "-")
	if len(parts) != 4 || len(label) > 63 {
		return previewLink{}, false
	}
	body := strings.Join(parts[:3], "-")
	if !hmac.Equal([]byte(parts[3]), []byte(s.labelMAC(body))) {
		return previewLink{}, false
	}
	port, err := computerd.ParsePort(parts[0])
	if err != nil {
		return previewLink{}, false
	}
	sec, err := strconv.ParseInt(parts[2], 36, 64)
	if err != nil {
		return previewLink{}, false
	}
	return previewLink{session: "s_" + parts[1], port: port, exp: time.Unix(sec, 0)}, true
}

// CheckPreviewDomain checks PREVIEW_DOMAIN and returns it in lower case.
// Its hosts must all reach this supervisor (a wildcard DNS record, and a
// wildcard certificate for HTTPS). The supervisor's own host (from
// publicURL, when known) must not be under it: every request to a host
// under it is a preview's.
func CheckPreviewDomain(domain, publicURL string) (string, error) {
	d := strings.ToLower(strings.TrimSuffix(domain, "."))
	if d == "" {
		return "", nil
	}
	labels := strings.Split(d, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") ||
			strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return "", fmt.Errorf("PREVIEW_DOMAIN=%q: want a DNS name such as preview.example.com (no scheme, port or path)", domain)
		}
	}
	if len(d) > 253-64 {
		return "", fmt.Errorf("PREVIEW_DOMAIN=%q: at most %d characters, to leave room for a preview's label", domain, 253-64)
	}
	if publicURL != "" {
		u, err := url.Parse(publicURL)
		if err == nil && u.Hostname() != "" {
			h := strings.ToLower(u.Hostname())
			if h == d || strings.HasSuffix(h, "."+d) {
				return "", fmt.Errorf("PREVIEW_DOMAIN=%q holds the supervisor's own host %s: every host under it serves previews only; use a domain of its own such as preview.%s", domain, h, h)
			}
		}
	}
	return d, nil
}

// PreviewHost reports whether host (a request's Host) is on the preview
// domain. Every request to such a host is a preview's: none reaches the
// API.
func (s *Service) PreviewHost(host string) bool {
	d := s.cfg.PreviewDomain
	if d == "" {
		return false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), "."+d)
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

// ServePreview serves the URLs Preview hands out: every path under
// PreviewPath, and every request to a host on the preview domain
// (PreviewHost). The token is the credential: no API key is asked for.
func (s *Service) ServePreview(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Robots-Tag", "noindex")
	if s.PreviewHost(r.Host) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		label, _, _ := strings.Cut(strings.ToLower(host), ".")
		link, ok := s.readPreviewLabel(label)
		s.servePreview(w, r, link, ok, r.URL.Path, false)
		return
	}
	tok, rest, slash := strings.Cut(strings.TrimPrefix(r.URL.Path, PreviewPath), "/")
	link, ok := s.readPreviewToken(tok)
	if ok && !slash && s.clk.Now().Before(link.exp) {
		// Relative links resolve against the folder: go to it.
		http.Redirect(w, r, PreviewPath+tok+"/", http.StatusFound)
		return
	}
	s.servePreview(w, r, link, ok, rest, true)
}

// servePreview passes r on to the link's port at path. A path-based
// preview is sandboxed into an origin of its own; a host-based one has
// its host's.
func (s *Service) servePreview(w http.ResponseWriter, r *http.Request, link previewLink, ok bool, rest string, sandbox bool) {
	fail := func(e *Error) { httpjson.WriteError(w, e.Status, e.Code, e.Message) }
	if !ok || !s.clk.Now().Before(link.exp) {
		fail(errorf(http.StatusNotFound, CodeNotFound, "this preview link is not valid, or has expired"))
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
	if sandbox {
		w.Header().Set("Content-Security-Policy", previewCSP)
	}
	rp := c.PortProxy(link.port, func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil {
			s.log.Info("port preview failed", "session", x.ID, "port", link.port, "err", err)
		}
		fail(errorf(http.StatusBadGateway, CodeProvider, "the computer did not answer for port %d: %v", link.port, err))
	})
	rp.ModifyResponse = func(resp *http.Response) error {
		keepForeignCookies(resp.Header, !sandbox)
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
// supervisor's cookies and, with hostOnly, the Domain attribute of the
// others, so that they stay with the host that set them.
func keepForeignCookies(h http.Header, hostOnly bool) {
	lines := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, l := range lines {
		name, _, _ := strings.Cut(strings.TrimSpace(l), "=")
		if ownCookie(strings.TrimSpace(name)) {
			continue
		}
		if hostOnly {
			l = withoutDomain(l)
		}
		h.Add("Set-Cookie", l)
	}
}

// withoutDomain removes the Domain attributes of a Set-Cookie line.
func withoutDomain(line string) string {
	attrs := strings.Split(line, ";")
	kept := attrs[:1]
	for _, a := range attrs[1:] {
		k, _, _ := strings.Cut(strings.TrimSpace(a), "=")
		if !strings.EqualFold(strings.TrimSpace(k), "domain") {
			kept = append(kept, a)
		}
	}
	return strings.Join(kept, ";")
}
