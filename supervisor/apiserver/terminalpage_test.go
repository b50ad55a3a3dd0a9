package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp/kb"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/testkit"
)

// TestTerminalPage: a terminal link's page and its files are served with
// a strict policy; its websocket opens the login shell once, at the size
// asked for, for a page of the same origin only.
func TestTerminalPage(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	ctx := testkit.Context(t)
	c := e.client()
	var ae *api.APIError
	if _, err := c.TerminalLink(ctx, "a1"); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "no_session" {
		t.Fatalf("link without a computer: %v", err)
	}
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	link, err := c.TerminalLink(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link.URL, e.srv.URL+"/terminal/s/") || !strings.HasSuffix(link.URL, "/") {
		t.Fatalf("link = %+v", link)
	}
	get := func(u string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get(link.URL)
	if resp.StatusCode != 200 || !strings.Contains(body, "assets/xterm.js") || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("page: %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	for file, ct := range map[string]string{"xterm.js": "text/javascript", "addon-fit.js": "text/javascript", "terminal.js": "text/javascript", "xterm.css": "text/css"} {
		if resp, body := get(e.srv.URL + "/terminal/assets/" + file); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ct) || len(body) < 100 {
			t.Errorf("%s: %d %s, %d bytes", file, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
	for _, file := range []string{"index.html", "VERSIONS", "LICENSE.xterm", "nope.js"} {
		if resp, _ := get(e.srv.URL + "/terminal/assets/" + file); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", file, resp.StatusCode)
		}
	}

	wsURL := "ws" + strings.TrimPrefix(link.URL, "http") + "ws?cols=90&rows=20"
	// Another site's page may not use the link.
	if _, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://elsewhere.example"}}}); err == nil {
		t.Fatal("a cross-origin websocket was accepted")
	}
	// The refusal above came after the link was taken: ask for another.
	if link, err = c.TerminalLink(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	wsURL = "ws" + strings.TrimPrefix(link.URL, "http") + "ws?cols=90&rows=20"
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {e.srv.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.Write(ctx, websocket.MessageBinary, []byte("stty size; exit 2\n"))
	var out strings.Builder
	var exit api.TerminalMessage
	for exit.Type == "" {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v; output %q", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(data)
		} else if err := json.Unmarshal(data, &exit); err != nil {
			t.Fatal(err)
		}
	}
	if exit.Type != "exit" || exit.ExitCode != 2 || !strings.Contains(out.String(), "20 90") {
		t.Fatalf("exit %+v, output %q", exit, out.String())
	}
	// A link works once.
	if _, resp, err := websocket.Dial(ctx, wsURL, nil); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Fatalf("second use: %v", err)
	}
}

// TestTerminalPageInChromium types into the terminal page in a real
// headless Chromium and reads the answer off the page.
func TestTerminalPageInChromium(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	testkit.RequireTools(t, "apt-get install -y chromium", chromium)
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	ctx := testkit.Context(t)
	link, err := e.client().TerminalLink(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1000, 700))
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(bctx, chromedp.Navigate(link.URL)); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		s, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("state").textContent`))
		return s
	}
	testkit.Eventually(t, 20*time.Second, "the page to connect", func() bool { return state() == "connected" })
	screen := func() string {
		s, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector(".xterm-rows").innerText`))
		return s
	}
	// Text goes in as a keyboard's input method would give it (a key
	// event with text reaches xterm.js twice from the debugger), Enter as
	// a key.
	typeLine := func(line string) {
		t.Helper()
		err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: line})
			return err
		}), chromedp.KeyEvent(kb.Enter))
		if err != nil {
			t.Fatal(err)
		}
	}
	typeLine("echo hi-$((1+2))")
	if !testkit.Poll(20*time.Second, func() bool { return strings.Contains(screen(), "hi-3") }) {
		focus, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.activeElement.className`))
		t.Fatalf("the page never showed hi-3 (focus on %q); it showed:\n%s", focus, screen())
	}
	typeLine("exit 4")
	testkit.Eventually(t, 20*time.Second, "the exit on the page", func() bool { return state() == "exited with 4" })
	t.Logf("page showed:\n%s", screen())
}
