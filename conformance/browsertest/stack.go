package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
)

// Operator is the stack's operator key.
const Operator = "browser-test-operator"

// Logs collects a stack's log lines; it is safe for the supervisor's
// goroutines to write while a test reads.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns what was logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Stack is a supervisor behind its REST API with one browser provider.
type Stack struct {
	t    *testing.T
	id   string
	p    providers.Provider
	cfg  supervisor.Config
	URL  string // the REST API
	Logs *Logs  // what the supervisor and the provider logged
	// Log is the logger whose lines go to Logs; give it to the provider.
	Log *slog.Logger
}

// NewStack returns a stack whose supervisor's default provider is id.
// newProvider makes the provider with the stack's logger.
func NewStack(t *testing.T, id string, newProvider func(log *slog.Logger) providers.Provider) *Stack {
	t.Helper()
	logs := &Logs{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	p := newProvider(log)
	parts := supervisortest.NewParts(t, t.TempDir())
	st, box, tokens := parts.Store, parts.Box, parts.Tokens
	s := &Stack{t: t, id: id, p: p, Logs: logs, Log: log, cfg: supervisor.Config{Store: st, Providers: map[string]providers.Provider{id: p},
		DefaultProvider: id, Box: box, Tokens: tokens, Logger: log, ReadyTimeout: 30 * time.Second}}
	svc := s.Restart()
	srv := httptest.NewServer(apiserver.New(svc, Operator, log))
	s.URL = srv.URL
	t.Cleanup(func() { srv.Close(); st.Close() })
	return s
}

// Restart makes another supervisor on the same store, as after a crash.
func (s *Stack) Restart() *supervisor.Service {
	s.t.Helper()
	svc, err := supervisor.New(s.cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return svc
}

// Call sends one REST call as the operator and returns its status and body.
func (s *Stack) Call(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+Operator)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// Connect makes agent and connects it to the provider with credentials
// and lease (0: the default).
func (s *Stack) Connect(agent string, credentials map[string]string, leaseSeconds int) {
	s.t.Helper()
	var extra map[string]any
	if leaseSeconds > 0 {
		extra = map[string]any{"leaseSeconds": leaseSeconds}
	}
	s.ConnectWith(agent, credentials, extra)
}

// ConnectWith makes agent and connects it to the provider with
// credentials and the connection's other fields in extra (such as
// browserRecording).
func (s *Stack) ConnectWith(agent string, credentials map[string]string, extra map[string]any) {
	s.t.Helper()
	if code, raw := s.Call("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}); code != http.StatusCreated {
		s.t.Fatalf("agent %s: %d %s", agent, code, raw)
	}
	body := map[string]any{"agent": agent, "provider": s.id, "credentials": credentials}
	for k, v := range extra {
		body[k] = v
	}
	if code, raw := s.Call("POST", "/v1/computers", body); code != http.StatusCreated {
		s.t.Fatalf("connect %s: %d %s", agent, code, raw)
	}
}

// Start starts agent's session and returns it, failing t unless it runs
// with both browser URLs, the CDP URL starting with cdpPrefix.
func (s *Stack) Start(agent, cdpPrefix string) supervisor.SessionView {
	s.t.Helper()
	code, raw := s.Call("POST", "/v1/agents/"+agent+"/computer/start", nil)
	if code != http.StatusOK {
		s.t.Fatalf("start %s: %d %s", agent, code, raw)
	}
	var v supervisor.SessionView
	if err := json.Unmarshal(raw, &v); err != nil {
		s.t.Fatalf("start %s: %v: %s", agent, err, raw)
	}
	if v.State != "running" || v.Browser == nil || !strings.HasPrefix(v.Browser.CDPURL, cdpPrefix) || v.Browser.LiveViewURL == "" {
		s.t.Fatalf("start answered %s, want a running session with the browser's URLs (CDP at %s…)", raw, cdpPrefix)
	}
	return v
}

// RequireNoShell checks that exec and the file tools on agent's session
// are refused with 422 and supervisor.CodeBrowserSession.
func (s *Stack) RequireNoShell(agent string) {
	s.t.Helper()
	for _, c := range []struct {
		tool string
		body any
	}{
		{"exec", map[string]any{"command": "true"}},
		{"read_file", map[string]any{"path": "a"}},
		{"write_file", map[string]any{"path": "a", "content": "x"}},
	} {
		code, raw := s.Call("POST", "/v1/agents/"+agent+"/computer/"+c.tool, c.body)
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(raw), supervisor.CodeBrowserSession) || !strings.Contains(string(raw), "not available on a browser session") {
			s.t.Errorf("%s: %d %s, want 422 %s", c.tool, code, raw, supervisor.CodeBrowserSession)
		}
	}
}

// CheckSession checks agent's running session v end to end: the Go
// client (and so berth mcp) starts the same session with the same browser
// URLs, the browser behind its CDP URL drives a page on loopback, exec and
// the file tools are refused, and a stop answers 200.
func (s *Stack) CheckSession(agent string, v supervisor.SessionView) {
	s.t.Helper()
	cl, err := api.New(s.URL, Operator)
	if err != nil {
		s.t.Fatal(err)
	}
	again, err := cl.Start(s.t.Context(), agent)
	if err != nil || again.ID != v.ID || again.Browser == nil || again.Browser.CDPURL != v.Browser.CDPURL || again.Browser.LiveViewURL != v.Browser.LiveViewURL {
		s.t.Errorf("client Start = %+v, %v; want session %s with its browser URLs", again, err, v.ID)
	}
	Drive(s.t, v.Browser.CDPURL)
	s.DriveTools(agent)
	s.RequireNoShell(agent)
	if code, raw := s.Call("POST", "/v1/agents/"+agent+"/computer/stop", nil); code != http.StatusOK {
		s.t.Fatalf("stop: %d %s", code, raw)
	}
}

// DriveTools drives the session's browser with the browser tools over
// REST, which the supervisor carries out over the session's CDP URL: it
// opens a page on loopback, reads its tree, clicks a button by its ref
// and reads the page's answer.
func (s *Stack) DriveTools(agent string) {
	s.t.Helper()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>tools page</title></head><body><button onclick="document.getElementById('x').textContent='clicked through the tools'">Press me</button><p id="x">waiting</p></body></html>`)
	}))
	defer page.Close()
	base := "/v1/agents/" + agent + "/computer/browser/"
	call := func(tool string, body any, out any) {
		s.t.Helper()
		code, raw := s.Call("POST", base+tool, body)
		if code != http.StatusOK {
			s.t.Fatalf("browser %s: %d %s", tool, code, raw)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("browser %s: %v: %s", tool, err, raw)
		}
	}
	var p api.BrowserPage
	call("navigate", map[string]any{"url": page.URL}, &p)
	if p.Title != "tools page" {
		s.t.Fatalf("navigate: %+v, want the page's title", p)
	}
	var snap api.BrowserSnapshot
	call("snapshot", nil, &snap)
	m := regexp.MustCompile(`button "Press me" \[ref=(e\d+)\]`).FindStringSubmatch(snap.Tree)
	if m == nil {
		s.t.Fatalf("snapshot has no button with a ref:\n%s", snap.Tree)
	}
	call("click", map[string]any{"ref": m[1]}, &p)
	call("wait_for", map[string]any{"text": "clicked through the tools", "timeoutMs": 10000}, &p)
}

// RequireNotLogged fails t where any of secrets is in the stack's logs.
func (s *Stack) RequireNotLogged(secrets map[string]string) {
	s.t.Helper()
	logs := s.Logs.String()
	for what, v := range secrets {
		if v == "" {
			s.t.Errorf("%s is empty: nothing to look for", what)
		} else if strings.Contains(logs, v) {
			s.t.Errorf("%s is in the logs", what)
		}
	}
}

// Drive drives the browser behind cdpURL with chromedp to a page on
// loopback and checks what it reads there.
func Drive(t *testing.T, cdpURL string) {
	t.Helper()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>berth-loopback-page</title></head><body><p id="x">hello from loopback</p></body></html>`)
	}))
	defer page.Close()
	DriveTo(t, cdpURL, page.URL, "berth-loopback-page", "hello from loopback")
}

// DriveTo drives the browser behind cdpURL with chromedp to pageURL and
// checks the page's title and the text of its #x element.
func DriveTo(t *testing.T, cdpURL, pageURL, wantTitle, wantText string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	actx, acancel := remote.NewAllocator(ctx, cdpURL)
	defer acancel()
	cctx, ccancel := chromedp.NewContext(actx)
	defer ccancel()
	if _, err := chromedp.Run(cctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("drive the browser over its CDP URL: %v", err)
	}
	title, err := chromedp.Run(cctx, chromedp.Title())
	if err != nil {
		t.Fatalf("title: %v", err)
	}
	text, err := chromedp.Run(cctx, chromedp.Text("#x"))
	if err != nil {
		t.Fatalf("text: %v", err)
	}
	if title != wantTitle || text != wantText {
		t.Errorf("page: title %q text %q", title, text)
	}
}
