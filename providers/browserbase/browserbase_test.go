package browserbase

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"go.uber.org/goleak"

	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/providertest"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/api"
	"github.com/berthdev/berth/supervisor/client"
	"github.com/berthdev/berth/supervisor/secrets"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var _ supervisor.BrowserSession = (*Browserbase)(nil)

const operator = "browserbase-test-operator"

// stack is a supervisor behind its REST API with this provider.
type stack struct {
	t    *testing.T
	fake *fakeBrowserbase
	p    *Browserbase
	srv  *httptest.Server
	logs *bytes.Buffer
	// restart makes another supervisor on the same store, as after a crash.
	restart func() *supervisor.Service
}

func newStack(t *testing.T) *stack {
	t.Helper()
	f := newFakeBrowserbase(t)
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	p, err := New(Options{APIURL: f.srv.URL, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := sqlstore.OpenSQLite(t.Context(), filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := secrets.LoadOrCreateKeyFile(filepath.Join(dir, "secret.key"))
	box, _ := secrets.NewBox(key)
	tokens, _ := token.NewDeriver([]byte(strings.Repeat("k", 32)))
	svc, err := supervisor.New(supervisor.Config{Store: st, Providers: map[string]providers.Provider{ID: p}, DefaultProvider: ID,
		Box: box, Tokens: tokens, Logger: log, ReadyTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, fake: f, p: p, srv: httptest.NewServer(api.New(svc, operator, log)), logs: logs}
	s.restart = func() *supervisor.Service {
		svc, err := supervisor.New(supervisor.Config{Store: st, Providers: map[string]providers.Provider{ID: p}, DefaultProvider: ID,
			Box: box, Tokens: tokens, Logger: log, ReadyTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	t.Cleanup(func() { s.srv.Close(); st.Close() })
	return s
}

func (s *stack) call(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequestWithContext(s.t.Context(), method, s.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+operator)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// TestBrowserSession starts a session through the supervisor, drives the
// browser behind its CDP URL with chromedp to a page on loopback, checks
// that exec and the file tools are refused, and stops it.
func TestBrowserSession(t *testing.T) {
	s := newStack(t)
	s.call("POST", "/v1/agents", map[string]any{"id": "bb", "name": "bb"})
	if code, raw := s.call("POST", "/v1/computers", map[string]any{"agent": "bb", "provider": ID, "leaseSeconds": 300,
		"credentials": map[string]string{CredAPIKey: s.fake.Key, CredProjectID: "proj-1"}}); code != 201 {
		t.Fatalf("connect: %d %s", code, raw)
	}
	code, raw := s.call("POST", "/v1/agents/bb/computer/start", nil)
	if code != 200 {
		t.Fatalf("start: %d %s", code, raw)
	}
	var v supervisor.SessionView
	json.Unmarshal(raw, &v)
	if v.State != "running" || v.Browser == nil || !strings.HasPrefix(v.Browser.CDPURL, "ws://127.0.0.1:") || v.Browser.LiveViewURL == "" {
		t.Fatalf("start answered %s, want a running session with the browser's URLs", raw)
	}
	body := s.fake.lastCreate
	if body["keepAlive"] != true || body["timeout"] != float64(300) || body["projectId"] != "proj-1" {
		t.Errorf("create body %v: want keepAlive, the lease as timeout and the projectId", body)
	}
	if meta, _ := body["userMetadata"].(map[string]any); meta[providers.LabelManaged] != "true" || meta[providers.LabelAgent] != "bb" {
		t.Errorf("userMetadata %v", body["userMetadata"])
	}

	// The Go client (and so berth mcp) carries the same URLs.
	cl, err := client.New(s.srv.URL, operator)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.Start(t.Context(), "bb")
	if err != nil || again.ID != v.ID || again.Browser == nil || again.Browser.CDPURL != v.Browser.CDPURL || again.Browser.LiveViewURL != v.Browser.LiveViewURL {
		t.Errorf("client Start = %+v, %v; want session %s with its browser URLs", again, err, v.ID)
	}

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>berth-loopback-page</title></head><body><p id="x">hello from loopback</p></body></html>`)
	}))
	defer page.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	actx, acancel := remote.NewAllocator(ctx, v.Browser.CDPURL)
	defer acancel()
	cctx, ccancel := chromedp.NewContext(actx)
	if _, err := chromedp.Run(cctx, chromedp.Navigate(page.URL)); err != nil {
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
	ccancel()
	if title != "berth-loopback-page" || text != "hello from loopback" {
		t.Errorf("page: title %q text %q", title, text)
	}

	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/agents/bb/computer/exec", map[string]any{"command": "true"}},
		{"/v1/agents/bb/computer/read_file", map[string]any{"path": "a"}},
		{"/v1/agents/bb/computer/write_file", map[string]any{"path": "a", "content": "x"}},
	} {
		code, raw := s.call("POST", c.path, c.body)
		if code != 422 || !strings.Contains(string(raw), supervisor.CodeBrowserSession) || !strings.Contains(string(raw), "not available on a browser session") {
			t.Errorf("%s: %d %s, want 422 %s", c.path, code, raw, supervisor.CodeBrowserSession)
		}
	}
	if code, raw := s.call("POST", "/v1/agents/bb/computer/stop", nil); code != 200 {
		t.Fatalf("stop: %d %s", code, raw)
	}
	if ok, _ := s.fake.exists(t.Context(), providers.LabelAgent, "bb"); ok {
		t.Errorf("the session still runs after stop")
	}
	if strings.Contains(s.logs.String(), s.fake.Key) {
		t.Errorf("the API key is in the logs")
	}
}

// TestLostCreateReply loses the create's reply: the session is found by
// its attempt label and adopted, and no second browser starts.
func TestLostCreateReply(t *testing.T) {
	s := newStack(t)
	s.call("POST", "/v1/agents", map[string]any{"id": "lost", "name": "lost"})
	s.call("POST", "/v1/computers", map[string]any{"agent": "lost", "provider": ID, "credentials": map[string]string{CredAPIKey: s.fake.Key}})
	s.fake.LoseNextCreateReply()
	code, raw := s.call("POST", "/v1/agents/lost/computer/start", nil)
	var v supervisor.SessionView
	json.Unmarshal(raw, &v)
	if code != 200 || v.Browser == nil || v.Browser.CDPURL == "" {
		t.Fatalf("start with a lost reply: %d %s, want the adopted session", code, raw)
	}
	if n := len(s.fake.sessions); n != 1 {
		t.Errorf("%d sessions at Browserbase, want 1", n)
	}
	s.call("POST", "/v1/agents/lost/computer/stop", nil)
}

// TestReconcile restarts the supervisor with a running session and a
// leftover whose release kept failing: reconciliation keeps the first,
// found by its user metadata, and releases the second.
func TestReconcile(t *testing.T) {
	s := newStack(t)
	for _, a := range []string{"rec", "left"} {
		s.call("POST", "/v1/agents", map[string]any{"id": a, "name": a})
		s.call("POST", "/v1/computers", map[string]any{"agent": a, "provider": ID, "credentials": map[string]string{CredAPIKey: s.fake.Key}})
		if code, raw := s.call("POST", "/v1/agents/"+a+"/computer/start", nil); code != 200 {
			t.Fatalf("start %s: %d %s", a, code, raw)
		}
	}
	s.fake.FailNextDeletes(1)
	s.call("POST", "/v1/agents/left/computer/stop", nil)
	if code, raw := s.call("POST", "/v1/agents/left/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}); code != 200 {
		t.Fatalf("confirm-cleanup: %d %s", code, raw)
	}
	if ok, _ := s.fake.exists(t.Context(), providers.LabelAgent, "left"); !ok {
		t.Fatalf("the leftover session is not running at Browserbase")
	}
	rep, err := s.restart().Reconcile(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kept != 1 || rep.Destroyed != 1 || rep.Vanished != 0 {
		t.Errorf("reconcile: %+v, want the running session kept and the leftover released", rep)
	}
	if ok, _ := s.fake.exists(t.Context(), providers.LabelAgent, "left"); ok {
		t.Errorf("the leftover session still runs after reconcile")
	}
	if ok, _ := s.fake.exists(t.Context(), providers.LabelAgent, "rec"); !ok {
		t.Errorf("reconcile released the running session")
	}
	s.call("POST", "/v1/agents/rec/computer/stop", nil)
}

// TestErrors maps Browserbase's answers.
func TestErrors(t *testing.T) {
	f := newFakeBrowserbase(t)
	p, _ := New(Options{APIURL: f.srv.URL})
	spec := providers.Spec{ComputerID: "c", Lease: time.Minute, Credentials: map[string]string{CredAPIKey: "bb_wrong_key_123"}}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrBadCredentials) || strings.Contains(err.Error(), "bb_wrong_key_123") {
		t.Errorf("bad key: %v", err)
	}
	f.rateLimit = 1
	spec.Credentials[CredAPIKey] = f.Key
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrCapacity) {
		t.Errorf("429: %v", err)
	}
	ctx := providers.WithCredentials(t.Context(), spec.Credentials)
	if err := p.Destroy(ctx, "gone"); err != nil {
		t.Errorf("release of an unknown session: %v", err)
	}
	if err := p.CheckCredentials(map[string]string{CredAPIKey: "k", "token": "x"}); err == nil {
		t.Errorf("CheckCredentials took a foreign key")
	}
}

// TestConformance runs the suite's scenarios that need no shell: a
// failing release retried until done, and refused credentials.
func TestConformance(t *testing.T) {
	h := providertest.Harness{
		ID: ID,
		New: func(pt providertest.T, log *slog.Logger) providertest.Target {
			f := newFakeBrowserbase(pt.(*testing.T))
			p, err := New(Options{APIURL: f.srv.URL, Logger: log})
			if err != nil {
				pt.Fatalf("%v", err)
			}
			return providertest.Target{Provider: p, Credentials: map[string]string{CredAPIKey: f.Key}, Faults: f, Exists: f.exists}
		},
	}
	for _, sc := range providertest.Scenarios() {
		if sc.Name == "FailingDelete" || sc.Name == "BadCredentials" {
			t.Run(sc.Name, func(t *testing.T) { sc.Run(t, h) })
		}
	}
}
