package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/testkit"
)

// stack is the browser tools as the supervisor reaches them: a Client,
// the Server behind httptest, a Launcher running the host's Chromium.
type stack struct {
	c *Client
	l *Launcher
}

const testToken = "secret-token"

func newStack(t testing.TB) *stack {
	t.Helper()
	requireChromium(t)
	l := NewLauncher(LauncherConfig{Binary: chromiumPath, Flags: testFlags, ProfileRoot: t.TempDir(), Logger: testLogger(t)})
	h := NewServer(l, testLogger(t))
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		api.Close()
		l.Close()
	})
	return &stack{c: NewClient(api.URL, testToken, api.Client(), nil), l: l}
}

func TestTools(t *testing.T) {
	s := newStack(t)
	web := pages(t)
	ctx := testkit.ContextTimeout(t, 3*time.Minute)
	c := s.c

	p, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/form"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Title != "Form" || p.URL != web.URL+"/form" {
		t.Fatalf("navigate = %+v", p)
	}
	snap, err := c.Snapshot(ctx, SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Nodes != strings.Count(snap.Tree, "\n") || snap.Title != "Form" {
		t.Fatalf("snapshot = %+v", snap)
	}
	for _, want := range []string{`- heading "Sign in" [level=1]`, `button "Later" [ref=`, `[disabled]`, `link "Links" [ref=`} {
		if !strings.Contains(snap.Tree, want) {
			t.Fatalf("snapshot lacks %q:\n%s", want, snap.Tree)
		}
	}
	name, echo, agree := refOf(t, snap.Tree, `textbox "Name"`), refOf(t, snap.Tree, `button "Echo"`), refOf(t, snap.Tree, `checkbox "Agree"`)

	t.Run("type and click", func(t *testing.T) {
		const text = "héllo — 世界 🚀"
		if _, err := c.Type(ctx, TypeRequest{Ref: name, Text: "old", Clear: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Type(ctx, TypeRequest{Ref: name, Text: text, Clear: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Click(ctx, ClickRequest{Ref: echo}); err != nil {
			t.Fatal(err)
		}
		ev, err := c.Evaluate(ctx, EvaluateRequest{Expression: `document.getElementById('out').textContent`})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		json.Unmarshal(ev.Value, &got)
		if got != "typed: "+text {
			t.Fatalf("page says %q, want %q", got, "typed: "+text)
		}
		if _, err := c.Click(ctx, ClickRequest{Ref: agree}); err != nil {
			t.Fatal(err)
		}
		snap, err := c.Snapshot(ctx, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(snap.Tree, `checkbox "Agree" [ref=`+agree+`]`) || !strings.Contains(snap.Tree, `[checked]`) || !strings.Contains(snap.Tree, `value="`+text+`"`) {
			t.Fatalf("snapshot after typing and checking:\n%s", snap.Tree)
		}
	})

	t.Run("scroll", func(t *testing.T) {
		if _, err := c.Scroll(ctx, ScrollRequest{DeltaY: 500}); err != nil {
			t.Fatal(err)
		}
		ev, err := c.Evaluate(ctx, EvaluateRequest{Expression: `window.scrollY`})
		if err != nil || string(ev.Value) != "500" {
			t.Fatalf("scrollY after scrolling 500 = %s, %v", ev.Value, err)
		}
		snap, _ := c.Snapshot(ctx, SnapshotRequest{})
		if _, err := c.Scroll(ctx, ScrollRequest{Ref: refOf(t, snap.Tree, `link "Links"`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Scroll(ctx, ScrollRequest{DeltaY: MaxScrollPixels + 1}); err == nil || !strings.Contains(err.Error(), "deltaY") {
			t.Fatalf("scroll over the limit = %v", err)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		for _, tt := range []struct {
			req  ScreenshotRequest
			w, h int
		}{
			{ScreenshotRequest{}, 1280, 720},
			{ScreenshotRequest{Format: FormatJPEG, Quality: 50}, 1280, 720},
			{ScreenshotRequest{FullPage: true}, 0, 0},
		} {
			shot, err := c.Screenshot(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			img, format, err := image.Decode(bytes.NewReader(shot.Data))
			if err != nil {
				t.Fatalf("%+v: %v", tt.req, err)
			}
			b := img.Bounds()
			if format != shot.Format || b.Dx() != shot.Width || b.Dy() != shot.Height || (tt.w != 0 && b.Dx() != tt.w) || (tt.h != 0 && b.Dy() != tt.h) {
				t.Fatalf("%+v: %s %dx%d, answer says %s %dx%d, want %dx%d", tt.req, format, b.Dx(), b.Dy(), shot.Format, shot.Width, shot.Height, tt.w, tt.h)
			}
			if tt.req.FullPage && b.Dy() <= 3000 {
				t.Fatalf("full page is %d high, want the whole page", b.Dy())
			}
		}
		shot, err := c.Screenshot(ctx, ScreenshotRequest{Ref: echo})
		if err != nil {
			t.Fatal(err)
		}
		if shot.Width < 20 || shot.Width > 300 || shot.Height < 10 || shot.Height > 100 {
			t.Fatalf("a button's screenshot is %dx%d", shot.Width, shot.Height)
		}
	})

	t.Run("press and submit", func(t *testing.T) {
		if _, err := c.Press(ctx, PressRequest{Key: "Control+Shift+Nope"}); err == nil {
			t.Fatal("an unknown key was accepted")
		} else if he := wantCode(t, err, 400, CodeBadRequest); !strings.Contains(he.Message, `"Nope"`) {
			t.Fatalf("message %q does not name the key", he.Message)
		}
		if _, err := c.Type(ctx, TypeRequest{Ref: name, Text: "abc", Clear: true}); err != nil {
			t.Fatal(err)
		}
		// Select all and type over it, then submit with Enter.
		if _, err := c.Press(ctx, PressRequest{Key: "Control+a", Ref: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Press(ctx, PressRequest{Key: "x"}); err != nil {
			t.Fatal(err)
		}
		p, err := c.Press(ctx, PressRequest{Key: "Enter"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Title != "Done" || !strings.HasSuffix(p.URL, "/done?name=x") {
			t.Fatalf("after Enter = %+v", p)
		}
	})

	t.Run("stale ref", func(t *testing.T) {
		_, err := c.Click(ctx, ClickRequest{Ref: echo})
		wantCode(t, err, 404, CodeRefNotFound)
		_, err = c.Click(ctx, ClickRequest{Ref: "e999999999"})
		wantCode(t, err, 404, CodeRefNotFound)
		_, err = c.Click(ctx, ClickRequest{Ref: "button"})
		wantCode(t, err, 400, CodeBadRequest)
	})

	t.Run("type submit and history", func(t *testing.T) {
		if _, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/form"}); err != nil {
			t.Fatal(err)
		}
		snap, _ := c.Snapshot(ctx, SnapshotRequest{})
		p, err := c.Type(ctx, TypeRequest{Ref: refOf(t, snap.Tree, `textbox "Name"`), Text: "sent", Submit: true})
		if err != nil || p.URL != web.URL+"/done?name=sent" {
			t.Fatalf("type with submit = %+v, %v", p, err)
		}
		if p, err := c.Navigate(ctx, NavigateRequest{URL: NavigateBack}); err != nil || p.Title != "Form" {
			t.Fatalf("back = %+v, %v", p, err)
		}
		if p, err := c.Navigate(ctx, NavigateRequest{URL: NavigateForward}); err != nil || p.Title != "Done" {
			t.Fatalf("forward = %+v, %v", p, err)
		}
		if p, err := c.Navigate(ctx, NavigateRequest{URL: NavigateReload}); err != nil || p.Title != "Done" {
			t.Fatalf("reload = %+v, %v", p, err)
		}
	})

	t.Run("text limit", func(t *testing.T) {
		_, err := c.Type(ctx, TypeRequest{Ref: name, Text: strings.Repeat("x", 100<<10)})
		he := wantCode(t, err, 400, CodeBadRequest)
		if !strings.Contains(he.Message, "text") || !strings.Contains(he.Message, "10000") {
			t.Fatalf("message %q does not name text and its limit", he.Message)
		}
	})

	t.Run("wait", func(t *testing.T) {
		if _, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/late"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, WaitRequest{Text: "arrived now", TimeoutMS: 5000}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := c.Wait(ctx, WaitRequest{Text: "never there", TimeoutMS: 500})
		wantCode(t, err, 504, CodeTimeout)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a 500 ms wait took %s", d)
		}
		if _, err := c.Wait(ctx, WaitRequest{TextGone: "never there", TimeoutMS: 500}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("evaluate", func(t *testing.T) {
		ev, err := c.Evaluate(ctx, EvaluateRequest{Expression: `Promise.resolve({a: 1, b: [true, "x"]})`})
		if err != nil || string(ev.Value) != `{"a":1,"b":[true,"x"]}` {
			t.Fatalf("evaluate = %s, %v", ev.Value, err)
		}
		ev, err = c.Evaluate(ctx, EvaluateRequest{Expression: `undefined`})
		if err != nil || string(ev.Value) != `null` {
			t.Fatalf("evaluate undefined = %s, %v", ev.Value, err)
		}
		_, err = c.Evaluate(ctx, EvaluateRequest{Expression: `throw new Error("boom here")`})
		if he := wantCode(t, err, 422, CodeEvaluateFailed); !strings.Contains(he.Message, "boom here") {
			t.Fatalf("message %q lacks the exception", he.Message)
		}
		_, err = c.Evaluate(ctx, EvaluateRequest{Expression: `"x".repeat(300000)`})
		if he := wantCode(t, err, 413, CodeBadRequest); !strings.Contains(he.Message, "262144") {
			t.Fatalf("message %q lacks the limit", he.Message)
		}
		start := time.Now()
		_, err = c.Evaluate(ctx, EvaluateRequest{Expression: `while (true) {}`, TimeoutMS: 500})
		if err == nil {
			t.Fatal("an endless script answered")
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("a 500 ms evaluation took %s", d)
		}
		if ev, err := c.Evaluate(ctx, EvaluateRequest{Expression: `1 + 1`}); err != nil || string(ev.Value) != "2" {
			t.Fatalf("evaluate after an endless script = %s, %v", ev.Value, err)
		}
	})

	t.Run("tabs", func(t *testing.T) {
		tabs, err := c.Tabs(ctx, TabsRequest{Action: TabsOpen, URL: web.URL + "/links"})
		if err != nil {
			t.Fatal(err)
		}
		if len(tabs.Tabs) != 2 || tabs.Selected != 1 || tabs.Tabs[1].Title != "Links" {
			t.Fatalf("after open = %+v", tabs)
		}
		if p, _ := c.Wait(ctx, WaitRequest{Text: "Late", TimeoutMS: 1000}); p.Title != "Links" || p.Tab != 1 {
			t.Fatalf("the new tab is not selected: %+v", p)
		}
		if tabs, err = c.Tabs(ctx, TabsRequest{Action: TabsSelect, Index: 0}); err != nil || tabs.Selected != 0 {
			t.Fatalf("select 0 = %+v, %v", tabs, err)
		}
		if p, _ := c.Wait(ctx, WaitRequest{TimeoutMS: 1}); p.Tab != 0 || p.Title == "Links" {
			t.Fatalf("tab 0 is not selected: %+v", p)
		}
		_, err = c.Tabs(ctx, TabsRequest{Action: TabsSelect, Index: 5})
		wantCode(t, err, 400, CodeBadRequest)
		if tabs, err = c.Tabs(ctx, TabsRequest{Action: TabsClose, Index: 0}); err != nil || len(tabs.Tabs) != 1 || tabs.Selected != 0 || tabs.Tabs[0].Title != "Links" {
			t.Fatalf("close 0 = %+v, %v", tabs, err)
		}
		if tabs, err = c.Tabs(ctx, TabsRequest{Action: TabsClose}); err != nil || len(tabs.Tabs) != 1 || tabs.Tabs[0].URL != "about:blank" {
			t.Fatalf("close the last = %+v, %v", tabs, err)
		}
		if tabs, err = c.Tabs(ctx, TabsRequest{}); err != nil || len(tabs.Tabs) != 1 {
			t.Fatalf("list = %+v, %v", tabs, err)
		}
	})

	t.Run("never loads", func(t *testing.T) {
		start := time.Now()
		_, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/never", TimeoutMS: 1000})
		wantCode(t, err, 504, CodeTimeout)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("a 1 s navigation took %s", d)
		}
		if p, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/links"}); err != nil || p.Title != "Links" {
			t.Fatalf("navigate after a timeout = %+v, %v", p, err)
		}
	})

	t.Run("navigation failed", func(t *testing.T) {
		ln := httptest.NewServer(http.NotFoundHandler())
		dead := ln.URL
		ln.Close()
		_, err := c.Navigate(ctx, NavigateRequest{URL: dead + "/x"})
		if he := wantCode(t, err, 502, CodeNavigationFailed); !strings.Contains(he.Message, "ERR_CONNECTION_REFUSED") {
			t.Fatalf("message %q", he.Message)
		}
		_, err = c.Navigate(ctx, NavigateRequest{URL: "ftp://example.com/"})
		wantCode(t, err, 400, CodeBadRequest)
	})

	t.Run("1000 elements", func(t *testing.T) {
		if _, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/many"}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		snap, err := c.Snapshot(ctx, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("snapshot of 1000 elements: %s, %d lines, %d bytes", time.Since(start), snap.Nodes, len(snap.Tree))
		if snap.Truncated || snap.Nodes < 1000 {
			t.Fatalf("snapshot of 1000 elements: %d lines, truncated %v", snap.Nodes, snap.Truncated)
		}
		snap, err = c.Snapshot(ctx, SnapshotRequest{MaxBytes: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if !snap.Truncated || len(snap.Tree) > 10000 || !strings.HasSuffix(snap.Tree, "\n") || snap.Nodes != strings.Count(snap.Tree, "\n") {
			t.Fatalf("a long tree: truncated %v, %d bytes", snap.Truncated, len(snap.Tree))
		}
	})

	t.Run("snapshot in the page", func(t *testing.T) {
		if _, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/rich"}); err != nil {
			t.Fatal(err)
		}
		snap, err := c.Snapshot(ctx, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`- navigation "Main"`, `  - heading "Café 世界" [level=2]`, `button "In the shadow" [ref=`, `text "Slotted text"`,
			`text "back by visibility"`, `summary "More" [ref=`, `combobox "Colour" [ref=`, `value="Green"`, `option "Green" [ref=`,
			`checkbox "Sure" [ref=`, `[checked]`, `textbox "Secret" [ref=`, `button "Send it" [ref=`, `img "A logo"`,
			`columnheader "Head"`, `cell "Cell"`, `generic [ref=`} {
			if !strings.Contains(snap.Tree, want) {
				t.Fatalf("snapshot lacks %q:\n%s", want, snap.Tree)
			}
		}
		// Hidden things are left out; the page's own berth is not ours.
		for _, unwanted := range []string{"gone by", "folded text", "secret", "abc", "forged"} {
			if strings.Contains(snap.Tree, unwanted) {
				t.Fatalf("snapshot has %q:\n%s", unwanted, snap.Tree)
			}
		}
		// Cut at a line's end, counting bytes of UTF-8 (the heading is
		// not ASCII).
		end := 0
		for i := 0; i < 6; i++ {
			end += strings.IndexByte(snap.Tree[end:], '\n') + 1
			for _, limit := range []int{end - 1, end} {
				cut, err := c.Snapshot(ctx, SnapshotRequest{MaxBytes: limit})
				if err != nil {
					t.Fatal(err)
				}
				want := snap.Tree[:strings.LastIndexByte(snap.Tree[:limit], '\n')+1]
				if cut.Tree != want || !cut.Truncated || cut.Nodes != strings.Count(want, "\n") {
					t.Fatalf("maxBytes %d: %q (truncated %v, %d nodes), want %q", limit, cut.Tree, cut.Truncated, cut.Nodes, want)
				}
			}
		}
		text := func(expr string) string {
			t.Helper()
			ev, err := c.Evaluate(ctx, EvaluateRequest{Expression: expr})
			if err != nil {
				t.Fatal(err)
			}
			var s string
			json.Unmarshal(ev.Value, &s)
			return s
		}
		shadow := refOf(t, snap.Tree, `button "In the shadow"`)
		if _, err := c.Click(ctx, ClickRequest{Ref: shadow}); err != nil {
			t.Fatal(err)
		}
		if got := text(`document.getElementById('host').shadowRoot.querySelector('button').textContent`); got != "shadow clicked" {
			t.Fatalf("the shadow button says %q", got)
		}
		if _, err := c.Click(ctx, ClickRequest{Ref: refOf(t, snap.Tree, `generic [ref=`)}); err != nil {
			t.Fatal(err)
		}
		if got := text(`document.getElementById('clickable').textContent`); got != "div clicked" {
			t.Fatalf("the div says %q", got)
		}
		// An element keeps its ref while it is in the page, and its ref
		// is not found once it left.
		again, err := c.Snapshot(ctx, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got := refOf(t, again.Tree, `button "shadow clicked"`); got != shadow {
			t.Fatalf("the shadow button's ref went from %s to %s", shadow, got)
		}
		doomed := refOf(t, snap.Tree, `button "Remove me"`)
		if _, err := c.Click(ctx, ClickRequest{Ref: doomed}); err != nil {
			t.Fatal(err)
		}
		_, err = c.Click(ctx, ClickRequest{Ref: doomed})
		wantCode(t, err, 404, CodeRefNotFound)
	})

	t.Run("crash", func(t *testing.T) {
		pid := s.l.PID()
		if pid == 0 {
			t.Fatal("no browser running")
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/links"})
		if err != nil {
			wantCode(t, err, 502, CodeBrowserFailed)
		}
		p, err := c.Navigate(ctx, NavigateRequest{URL: web.URL + "/links"})
		if err != nil || p.Title != "Links" {
			t.Fatalf("navigate after the crash = %+v, %v", p, err)
		}
		if s.l.PID() == pid || s.l.PID() == 0 {
			t.Fatalf("browser pid %d after the crash of %d", s.l.PID(), pid)
		}
	})
}

func TestServerRefusals(t *testing.T) {
	h := NewServer(NewLauncher(LauncherConfig{Binary: "/nonexistent/chromium"}), nil)
	for _, tt := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", PathNavigate, `{"url":"https://example.com","colour":1}`, 400, CodeBadRequest},
		{"POST", PathNavigate, `{"url":""}`, 400, CodeBadRequest},
		{"GET", PathSnapshot, ``, 405, CodeBadRequest},
		{"POST", PathPrefix + "nope", `{}`, 404, CodeBadRequest},
		{"POST", PathEvaluate, `{"expression":"` + strings.Repeat("x", MaxRequestBytes) + `"}`, 413, CodeBadRequest},
		{"POST", PathSnapshot, ``, 502, CodeBrowserFailed}, // no chromium here
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
		var body struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != tt.status || body.Error.Code != tt.code {
			t.Errorf("%s %s = %d %s %q, want %d %s", tt.method, tt.path, w.Code, body.Error.Code, body.Error.Message, tt.status, tt.code)
		}
	}
}

func TestLauncherArgs(t *testing.T) {
	l := NewLauncher(LauncherConfig{})
	env := []string{"BERTH_CHROMIUM_FLAGS=--no-sandbox --disable-sync", "https_proxy=http://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1, .internal"}
	args := strings.Join(l.args(env, "/tmp/p"), " ")
	for _, want := range []string{"--no-sandbox --disable-sync", "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
		"--user-data-dir=/tmp/p", "--window-size=1280,720", "--proxy-server=http://127.0.0.1:3128", "--proxy-bypass-list=localhost;127.0.0.1;.internal"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	args = strings.Join(l.args([]string{"DISPLAY=:0"}, "/tmp/p"), " ")
	if strings.Contains(args, "--headless") || strings.Contains(args, "--proxy") {
		t.Errorf("args with a display and no proxy = %q", args)
	}
}

func BenchmarkBrowserSnapshot1000(b *testing.B) {
	s := newStack(b)
	srv := pages(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := s.c.Navigate(ctx, NavigateRequest{URL: srv.URL + "/many"}); err != nil {
		b.Fatal(err)
	}
	snap, err := s.c.Snapshot(ctx, SnapshotRequest{MaxBytes: MaxSnapshotBytes})
	if err != nil {
		b.Fatal(err)
	}
	if snap.Nodes < 1000 || strings.Count(snap.Tree, "[ref=") < 750 {
		b.Fatalf("snapshot of 1000 elements has %d lines, %d refs", snap.Nodes, strings.Count(snap.Tree, "[ref="))
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.c.Snapshot(ctx, SnapshotRequest{MaxBytes: MaxSnapshotBytes}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLauncherSaysWhyTheBrowserDidNotStart: a browser that exits before
// DevTools listens, or never listens, is answered with what it wrote on
// stderr (its first lines, each cut short), so that the caller sees why.
func TestLauncherSaysWhyTheBrowserDidNotStart(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("x", 300)
	for _, tt := range []struct {
		name, body, code string
		want             []string
	}{
		{"exits", "echo 'error while loading shared libraries: libnss3.so' >&2\necho " + long + " >&2\nexit 127\n",
			CodeBrowserFailed, []string{"exited before DevTools listened (exit status 127)", "it wrote: error while loading shared libraries: libnss3.so | " + strings.Repeat("x", 200) + "…"}},
		{"hangs", "echo 'waiting for the display' >&2\nexec sleep 30\n",
			CodeTimeout, []string{"DevTools did not listen within 300ms", "it wrote: waiting for the display"}},
		{"silent", "exit 3\n", CodeBrowserFailed, []string{"(exit status 3)"}},
	} {
		l := NewLauncher(LauncherConfig{Binary: script(tt.name, tt.body), ProfileRoot: t.TempDir(), StartTimeout: 300 * time.Millisecond})
		_, err := l.Snapshot(testkit.ContextTimeout(t, 30*time.Second), SnapshotRequest{})
		l.Close()
		var e *httpjson.Error
		if !errors.As(err, &e) || e.Code != tt.code {
			t.Errorf("%s: %v, want code %s", tt.name, err, tt.code)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s: %q does not say %q", tt.name, e.Message, w)
			}
		}
		if tt.name == "silent" && strings.Contains(e.Message, "it wrote") {
			t.Errorf("silent: %q", e.Message)
		}
	}
}
