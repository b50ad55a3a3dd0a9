package apiserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/api"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().(*net.TCPAddr).Port, seen
}

func get(t *testing.T, u string, cookie string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
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
