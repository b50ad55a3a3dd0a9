package e2e

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/daemon"
)

//go:embed testdata/previewapp.js
var previewApp string

// serveApp starts the preview app in the agent's computer on port,
// listening on host, and waits until it answers through a preview link,
// which it returns.
func serveApp(t testing.TB, s *super, agent string, port int, host string) api.Preview {
	t.Helper()
	s.must("POST", "/v1/agents/"+agent+"/computer/write_file", map[string]any{"path": "previewapp.js", "content": previewApp}, 200, nil)
	if x := s.exec(agent, fmt.Sprintf("nohup node previewapp.js %d %s >app.log 2>&1 &", port, host)); x.ExitCode != 0 {
		t.Fatalf("start the app: %+v", x)
	}
	var p api.Preview
	s.must("POST", fmt.Sprintf("/v1/agents/%s/computer/ports/%d/preview", agent, port), nil, 201, &p)
	if !testkit.Poll(30*time.Second, func() bool {
		code, body := fetch(t, p.URL+"tiny")
		return code == 200 && body == "ok"
	}) {
		t.Fatalf("the app never answered through %s: %s", p.URL, s.exec(agent, "cat app.log").Stdout)
	}
	return p
}

// fetch GETs u without following redirects.
func fetch(t testing.TB, u string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// openApp opens the preview app at u in headless Chromium and waits until
// its page has talked to the app over a websocket through the link.
func openApp(t *testing.T, ctx context.Context, u string) context.Context {
	t.Helper()
	bctx := browser(t, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	var out string
	if !testkit.Poll(20*time.Second, func() bool {
		out, _ = chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("out") ? document.getElementById("out").textContent : ""`))
		return out == "echo: ping from the page"
	}) {
		t.Fatalf("the page's websocket through the preview: %q, want the app's echo", out)
	}
	return bctx
}

// TestPortPreviewDocker opens a web app served in a real Docker computer
// through a preview link: in headless Chromium (its page talks to the app
// over a websocket through the link), with a Go websocket client, and
// with paths that try to climb out of the link to the supervisor's API.
// After the session stops the link is refused.
func TestPortPreviewDocker(t *testing.T) {
	requireDocker(t, "berth/headless:latest")
	requireChromium(t)
	heavy(t)
	s := startSupervisor(t, "berth/headless:latest")
	connect(s, "pv")
	s.must("POST", "/v1/agents/pv/computer/start", nil, 200, nil)
	p := serveApp(t, s, "pv", 8080, "127.0.0.1")
	if !strings.HasPrefix(p.URL, s.url+"/p/") {
		t.Fatalf("preview URL %q is not under the supervisor's %s/p/", p.URL, s.url)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx := openApp(t, ctx, p.URL)
	title, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.title`))
	if err != nil || title != "Preview app" {
		t.Fatalf("title %q, %v", title, err)
	}
	// The page runs in an origin of its own: it cannot use the
	// supervisor's.
	origin, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`self.origin`))
	if origin != "null" {
		t.Errorf("the previewed page's origin is %q, want null (sandboxed)", origin)
	}

	wsURL := "ws" + strings.TrimPrefix(p.URL, "http") + "ws"
	ws, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("websocket through %s: %v", wsURL, err)
	}
	for _, msg := range []string{"one", strings.Repeat("é", 1000)} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := ws.Read(ctx); err != nil || string(got) != "echo: "+msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")

	u, _ := url.Parse(s.url)
	for _, sneaky := range []string{"../../v1/computers", "%2e%2e/%2e%2e/v1/computers", "..%2f..%2fv1%2fcomputers", "//" + u.Host + "/v1/computers"} {
		code, body := fetch(t, p.URL+sneaky)
		if code != 404 || !strings.HasPrefix(body, "not found: /") {
			t.Errorf("%s: %d %q, want the app's own 404", sneaky, code, body)
		}
	}

	s.must("POST", "/v1/agents/pv/computer/stop", nil, 200, nil)
	var code int
	if !testkit.Poll(10*time.Second, func() bool { code, _ = fetch(t, p.URL+"tiny"); return code == 410 }) {
		t.Fatalf("the link after the session stopped: %d, want 410", code)
	}
}

// BenchmarkPortPreview compares a port preview with a direct connection
// to the same app in the same Docker computer, in the same run: the p50
// of a small GET on a kept-alive connection (target: at most 2 ms added)
// and the throughput of a 256 MB GET (target: at least 0.5x).
func BenchmarkPortPreview(b *testing.B) {
	requireDocker(b, "berth/headless:latest")
	s := startSupervisor(b, "berth/headless:latest")
	connect(s, "pb")
	s.must("POST", "/v1/agents/pb/computer/start", nil, 200, nil)
	defer s.call("POST", "/v1/agents/pb/computer/stop", nil, nil)
	p := serveApp(b, s, "pb", 8080, "0.0.0.0")
	x, err := s.d.Store.LiveSession(context.Background(), "pb")
	if err != nil {
		b.Fatal(err)
	}
	ep, err := url.Parse(x.Endpoint)
	if err != nil {
		b.Fatal(err)
	}
	direct := "http://" + ep.Hostname() + ":8080/"
	if code, body := fetch(b, direct+"tiny"); code != 200 || body != "ok" {
		b.Fatalf("the app straight at %s: %d %q", direct, code, body)
	}
	tr := &http.Transport{}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Timeout: time.Minute, Transport: tr}
	get := func(u string) (time.Duration, int64) {
		t0 := time.Now()
		resp, err := client.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d, %v", u, resp.StatusCode, err)
		}
		return time.Since(t0), n
	}
	const small, bigN = 200, 256 << 20
	var ours, base []time.Duration
	var oursBig, baseBig time.Duration
	for i := 0; b.Loop(); i++ {
		for range small {
			d, _ := get(p.URL + "tiny")
			ours = append(ours, d)
			d, _ = get(direct + "tiny")
			base = append(base, d)
		}
		big := fmt.Sprintf("big?n=%d", bigN)
		if i%2 == 0 {
			d, _ := get(p.URL + big)
			oursBig += d
			d, _ = get(direct + big)
			baseBig += d
		} else {
			d, _ := get(direct + big)
			baseBig += d
			d, _ = get(p.URL + big)
			oursBig += d
		}
	}
	o, r := median(ours), median(base)
	b.ReportMetric(float64(o.Microseconds())/1000, "preview-p50-ms")
	b.ReportMetric(float64(r.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64((o-r).Microseconds())/1000, "added-ms")
	mbs := func(d time.Duration) float64 { return float64(bigN) * float64(b.N) / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(oursBig), "preview-MB/s")
	b.ReportMetric(mbs(baseBig), "direct-MB/s")
	b.ReportMetric(mbs(oursBig)/mbs(baseBig), "ratio")
	b.ReportMetric(0, "ns/op")
}

// TestPortPreviewHostDocker opens a preview on a host of its own
// (PREVIEW_DOMAIN=preview.localhost, which Chromium resolves to loopback)
// in headless Chromium: the app's page runs in that host's origin, not a
// sandboxed one, and talks to the app over a websocket through it.
func TestPortPreviewHostDocker(t *testing.T) {
	requireDocker(t, "berth/headless:latest")
	requireChromium(t)
	heavy(t)
	s, _ := serveDaemon(t, daemon.Options{Egress: daemon.EgressOptions{Listen: ":0"}},
		map[string]string{"COMPUTER_IMAGE_HEADLESS": "berth/headless:latest", "COMPUTER_MEMORY_MB": "512",
			"COMPUTER_NETWORK_POOL": "1", "PREVIEW_DOMAIN": "preview.localhost"})
	connect(s, "pvh")
	s.must("POST", "/v1/agents/pvh/computer/start", nil, 200, nil)
	t.Cleanup(func() { s.call("POST", "/v1/agents/pvh/computer/stop", nil, nil) })
	s.must("POST", "/v1/agents/pvh/computer/write_file", map[string]any{"path": "previewapp.js", "content": previewApp}, 200, nil)
	if x := s.exec("pvh", "nohup node previewapp.js 8080 127.0.0.1 >app.log 2>&1 &"); x.ExitCode != 0 {
		t.Fatalf("start the app: %+v", x)
	}
	var p api.Preview
	s.must("POST", "/v1/agents/pvh/computer/ports/8080/preview", nil, 201, &p)
	u, err := url.Parse(p.URL)
	if err != nil || !strings.HasSuffix(u.Hostname(), ".preview.localhost") || u.Path != "/" {
		t.Fatalf("preview URL %q: want a host under preview.localhost", p.URL)
	}
	// Go does not resolve *.localhost: dial the supervisor, keep the Host.
	sup, _ := url.Parse(s.url)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, sup.Host)
	}}}
	if !testkit.Poll(30*time.Second, func() bool {
		resp, err := c.Get(p.URL + "tiny")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
		return resp.StatusCode == 200 && string(b) == "ok"
	}) {
		t.Fatalf("the app never answered through %s: %s", p.URL, s.exec("pvh", "cat app.log").Stdout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx := openApp(t, ctx, p.URL)
	origin, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`self.origin`))
	if want := "http://" + u.Host; origin != want {
		t.Errorf("the previewed page's origin is %q, want %q", origin, want)
	}
}
