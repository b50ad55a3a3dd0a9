package apiserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// appServer is a web server in the computer (the fake provider's
// computers share the host's loopback): a page, an echo websocket, and
// an answer that tries to set the supervisor's cookie.
func appServer(t *testing.T) (port int, seen chan http.Header) {
	t.Helper()
	seen = make(chan http.Header, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Clone():
		default:
		}
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1"})
		http.SetCookie(w, &http.Cookie{Name: "berth_session", Value: "forged"})
		io.WriteString(w, "app page at "+r.URL.Path)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	return listenApp(t, mux), seen
}

// listenApp serves h on a loopback port of its own and returns the port.
func listenApp(t *testing.T, h http.Handler) int {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

func get(t *testing.T, u string, cookie string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	return do(t, req)
}

// do sends req without following redirects and returns the answer and
// its body.
func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestPortPreview: a preview link reaches the port in the computer (page
// and websocket), nothing else, and stops with the session.
func TestPortPreview(t *testing.T) {
	e := newEnv(t)
	e.connect("pv", 900, 36000)
	port, seen := appServer(t)
	path := "/v1/agents/pv/computer/ports/" + strconv.Itoa(port) + "/preview"
	if st, code := e.call("POST", path, nil, nil); st != 409 || code != "no_session" {
		t.Fatalf("preview without a running computer: %d %s, want 409 no_session", st, code)
	}
	e.mustCall("POST", "/v1/agents/pv/computer/start", nil, 200, nil)
	for _, bad := range []string{"0", "65536", "x", "-1", "08080", "7070"} {
		if st, code := e.call("POST", "/v1/agents/pv/computer/ports/"+bad+"/preview", nil, nil); st != 400 || code != "bad_request" {
			t.Errorf("port %q: %d %s, want 400 bad_request", bad, st, code)
		}
	}
	var p api.Preview
	e.mustCall("POST", path, nil, 201, &p)
	if !strings.HasPrefix(p.URL, e.srv.URL+"/p/") || !strings.HasSuffix(p.URL, "/") || p.Port != port || p.ExpiresAt.IsZero() {
		t.Fatalf("preview = %+v", p)
	}

	resp, body := get(t, p.URL+"hello?x=1", "berth_session=operator-secret; app=1")
	if resp.StatusCode != 200 || body != "app page at /hello" {
		t.Fatalf("GET through the preview: %d %q", resp.StatusCode, body)
	}
	h := <-seen
	if ck := h.Get("Cookie"); strings.Contains(ck, "berth") || !strings.Contains(ck, "app=1") {
		t.Errorf("the app got cookies %q: want its own only", ck)
	}
	if a := h.Get("Authorization"); a != "" {
		t.Errorf("the app got Authorization %q", a)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") {
		t.Errorf("Content-Security-Policy %q, want a sandbox", csp)
	}
	if rp := resp.Header.Get("Referrer-Policy"); rp != "no-referrer" {
		t.Errorf("Referrer-Policy %q", rp)
	}
	for _, c := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "berth") {
			t.Errorf("the app set the supervisor's cookie: %q", c)
		}
	}

	// Nothing but the port: dots, encoded or not, stay inside it.
	for _, sneaky := range []string{"../../v1/computers", "%2e%2e/%2e%2e/v1/computers", "..%2f..%2fv1%2fcomputers", "a/../../../v1/computers"} {
		resp, body := get(t, p.URL+sneaky, "")
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "app page at /") || strings.Contains(body, "agents") {
			t.Errorf("%s: %d %q, want the app's own page", sneaky, resp.StatusCode, body)
		}
	}
	tok := strings.TrimSuffix(strings.TrimPrefix(p.URL, e.srv.URL+"/p/"), "/")
	forged := strings.Replace(tok, "."+strconv.Itoa(port)+".", ".7071.", 1)
	if resp, _ := get(t, e.srv.URL+"/p/"+forged+"/", ""); resp.StatusCode != 404 {
		t.Errorf("a token changed to another port: %d, want 404", resp.StatusCode)
	}
	if resp, _ := get(t, e.srv.URL+"/p/"+tok, ""); resp.StatusCode != 302 || resp.Header.Get("Location") != "/p/"+tok+"/" {
		t.Errorf("the link without its slash: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// A websocket passes through both ways.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.URL, "http")+"ws", nil)
	if err != nil {
		t.Fatalf("websocket through the preview: %v", err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("héllo")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "echo: héllo" {
		t.Fatalf("echo = %q, %v", msg, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// A port nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var q api.Preview
	e.mustCall("POST", "/v1/agents/pv/computer/ports/"+strconv.Itoa(closed)+"/preview", nil, 201, &q)
	if resp, body := get(t, q.URL, ""); resp.StatusCode != 502 || !strings.Contains(body, "port_closed") {
		t.Errorf("a closed port: %d %s, want 502 port_closed", resp.StatusCode, body)
	}

	// The link ends with the session.
	e.mustCall("POST", "/v1/agents/pv/computer/stop", nil, 200, nil)
	e.clock.Advance(2 * time.Second) // past what a preview trusts of its session
	if resp, body := get(t, p.URL, ""); resp.StatusCode != 410 || strings.Contains(body, "app page") {
		t.Fatalf("after the stop: %d %q, want 410", resp.StatusCode, body)
	}
}

// hostGet GETs path from the test server with the given Host, with the
// operator's token.
func hostGet(t *testing.T, srvURL, host, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srvURL+path, nil)
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+opToken)
	return do(t, req)
}

// TestPortPreviewHost: with a preview domain each link is a host of its
// own whose whole path is the app's (absolute links work), in its own
// origin (no sandbox), with cookies kept to that host; no host under the
// domain reaches the API, a forged or changed label is refused, and the
// link ends with the session.
func TestPortPreviewHost(t *testing.T) {
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, st, func(c *supervisor.Config) { c.PreviewDomain = "preview.test" })
	e.connect("ph", 900, 36000)
	port := appServerWithCookie(t, "theme=dark; Domain=preview.test; Path=/")
	e.mustCall("POST", "/v1/agents/ph/computer/start", nil, 200, nil)
	var p api.Preview
	e.mustCall("POST", "/v1/agents/ph/computer/ports/"+strconv.Itoa(port)+"/preview", nil, 201, &p)
	u, err := url.Parse(p.URL)
	if err != nil || u.Path != "/" || !strings.HasSuffix(u.Hostname(), ".preview.test") || u.Port() != strings.TrimPrefix(e.srv.URL[strings.LastIndex(e.srv.URL, ":"):], ":") {
		t.Fatalf("preview URL %q: want http://{label}.preview.test:{the server's port}/", p.URL)
	}
	label, _, _ := strings.Cut(u.Hostname(), ".")
	if len(label) > 63 || !strings.HasPrefix(label, strconv.Itoa(port)+"-") {
		t.Fatalf("label %q", label)
	}

	resp, body := hostGet(t, e.srv.URL, u.Host, "/static/app.js")
	if resp.StatusCode != 200 || body != "app page at /static/app.js" {
		t.Fatalf("an absolute path on the preview's host: %d %q", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != "" {
		t.Errorf("Content-Security-Policy %q on a host of its own, want none", csp)
	}
	var cookies []string
	for _, c := range resp.Header.Values("Set-Cookie") {
		cookies = append(cookies, c)
		if strings.Contains(strings.ToLower(c), "domain=") || strings.HasPrefix(c, "berth") {
			t.Errorf("Set-Cookie %q: want the app's cookies, kept to the preview's host", c)
		}
	}
	if !slices.ContainsFunc(cookies, func(c string) bool { return strings.HasPrefix(c, "theme=dark") }) {
		t.Errorf("Set-Cookie %q: the app's cookie is missing", cookies)
	}
	// The API is not on a preview host, even with the operator's token.
	if resp, body := hostGet(t, e.srv.URL, u.Host, "/v1/computers"); resp.StatusCode != 200 || body != "app page at /v1/computers" {
		t.Errorf("/v1/computers on the preview's host: %d %q, want the app's page", resp.StatusCode, body)
	}
	// The label with its last character changed (to one it does not end in).
	other := "0"
	if strings.HasSuffix(label, other) {
		other = "1"
	}
	for _, bad := range []string{
		"api.preview.test",
		strings.Replace(label, strconv.Itoa(port)+"-", "7071-", 1) + ".preview.test",
		label[:len(label)-1] + other + ".preview.test",
	} {
		if resp, body := hostGet(t, e.srv.URL, bad, "/v1/computers"); resp.StatusCode != 404 || strings.Contains(body, "app page") || strings.Contains(body, "computers\"") {
			t.Errorf("host %s: %d %q, want 404", bad, resp.StatusCode, body)
		}
	}
	// The supervisor's own host still serves the API and path previews.
	if st, _ := e.call("GET", "/v1/computers", nil, nil); st != 200 {
		t.Errorf("the API on its own host: %d", st)
	}

	e.mustCall("POST", "/v1/agents/ph/computer/stop", nil, 200, nil)
	e.clock.Advance(2 * time.Second)
	if resp, _ := hostGet(t, e.srv.URL, u.Host, "/"); resp.StatusCode != 410 {
		t.Fatalf("after the stop: %d, want 410", resp.StatusCode)
	}
}

// appServerWithCookie is an app that sets the given cookie line.
func appServerWithCookie(t *testing.T, cookie string) int {
	t.Helper()
	return listenApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", cookie)
		w.Header().Add("Set-Cookie", "berth_session=forged; Domain=preview.test")
		io.WriteString(w, "app page at "+r.URL.Path)
	}))
}

func TestCheckPreviewDomain(t *testing.T) {
	for _, c := range []struct{ domain, public, want, err string }{
		{"Preview.Example.com.", "", "preview.example.com", ""},
		{"", "https://berth.example.com", "", ""},
		{"preview.example.com", "https://berth.example.com", "preview.example.com", ""},
		{"example.com", "https://berth.example.com", "", "holds the supervisor's own host berth.example.com"},
		{"berth.example.com", "https://berth.example.com:8443", "", "holds the supervisor's own host"},
		{"https://preview.example.com", "", "", "want a DNS name"},
		{"preview.example.com:8080", "", "", "want a DNS name"},
		{"pre_view.example.com", "", "", "want a DNS name"},
	} {
		got, err := supervisor.CheckPreviewDomain(c.domain, c.public)
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("CheckPreviewDomain(%q, %q) = %q, %v; want %q, an error with %q", c.domain, c.public, got, err, c.want, c.err)
		}
	}
}
