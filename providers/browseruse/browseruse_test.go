package browseruse

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/conformance/browsertest"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

var _ supervisor.BrowserSession = (*BrowserUse)(nil)

// newStack is a supervisor behind its REST API with this provider against
// a fake Browser Use.
func newStack(t *testing.T) (*browsertest.Stack, *fakeBrowserUse) {
	t.Helper()
	f := newFakeBrowserUse(t)
	s := browsertest.NewStack(t, ID, func(log *slog.Logger) providers.Provider {
		p, err := New(Options{APIURL: f.srv.URL + "/api/v3", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
	return s, f
}

// TestBrowserSession starts a session through the supervisor, drives the
// browser behind its CDP URL with chromedp to a page on loopback, checks
// that exec and the file tools are refused, and stops it; the API key is
// not logged.
func TestBrowserSession(t *testing.T) {
	s, f := newStack(t)
	s.Connect("bu", map[string]string{CredAPIKey: f.Key}, 300)
	v := s.Start("bu", "http://127.0.0.1:")
	f.Mu.Lock()
	body := f.lastCreate
	f.Mu.Unlock()
	if body["timeout"] != float64(5) {
		t.Errorf("create body %v: want the lease (300 s) as a 5-minute timeout", body)
	}

	// The Go client (and so berth mcp) carries the same URLs.
	cl, err := api.New(s.URL, browsertest.Operator)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.Start(t.Context(), "bu")
	if err != nil || again.ID != v.ID || again.Browser == nil || again.Browser.CDPURL != v.Browser.CDPURL || again.Browser.LiveViewURL != v.Browser.LiveViewURL {
		t.Errorf("client Start = %+v, %v; want session %s with its browser URLs", again, err, v.ID)
	}

	browsertest.Drive(t, v.Browser.CDPURL)
	s.RequireNoShell("bu")
	if code, raw := s.Call("POST", "/v1/agents/bu/computer/stop", nil); code != 200 {
		t.Fatalf("stop: %d %s", code, raw)
	}
	if n := f.active(); n != 0 {
		t.Errorf("%d browsers still run after stop", n)
	}
	s.RequireNotLogged(map[string]string{"the API key": f.Key})
}

// TestLostCreateReply loses the create's reply: Browser Use cannot tag a
// browser, so the session is uncertain, no second browser starts, and a
// person's confirmation closes it.
func TestLostCreateReply(t *testing.T) {
	s, f := newStack(t)
	s.Connect("lost", map[string]string{CredAPIKey: f.Key}, 0)
	f.LoseNextCreateReply()
	code, raw := s.Call("POST", "/v1/agents/lost/computer/start", nil)
	if code != 502 || !strings.Contains(string(raw), supervisor.CodeUncertain) {
		t.Fatalf("start with a lost reply: %d %s, want 502 %s", code, raw, supervisor.CodeUncertain)
	}
	if code, raw := s.Call("POST", "/v1/agents/lost/computer/start", nil); code != 409 {
		t.Errorf("start while uncertain: %d %s, want 409", code, raw)
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d browsers at Browser Use, want 1", n)
	}
	if code, raw := s.Call("POST", "/v1/agents/lost/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}); code != 200 {
		t.Errorf("confirm-cleanup: %d %s", code, raw)
	}
}

// TestErrors maps Browser Use's answers.
func TestErrors(t *testing.T) {
	f := newFakeBrowserUse(t)
	p, err := New(Options{APIURL: f.srv.URL + "/api/v3"})
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Errors(t, p, p, CredAPIKey, f.Key, func() { f.Mu.Lock(); f.RateLimit = 1; f.Mu.Unlock() })
}

// TestConformance runs the suite's scenarios that need no shell.
func TestConformance(t *testing.T) {
	browsertest.Conformance(t, ID, func(t *testing.T, log *slog.Logger) providertest.Target {
		f := newFakeBrowserUse(t)
		p, err := New(Options{APIURL: f.srv.URL + "/api/v3", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Target{Provider: p, Credentials: map[string]string{CredAPIKey: f.Key}, Faults: f, Exists: f.exists}
	})
}
