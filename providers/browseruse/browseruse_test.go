package browseruse

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

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

// newProvider is the provider against f, with o's other options.
func newProvider(t testing.TB, f *fakeBrowserUse, o Options) *BrowserUse {
	t.Helper()
	o.APIURL = f.srv.URL + "/api/v3"
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newStack is a supervisor behind its REST API with this provider against
// a fake Browser Use.
func newStack(t *testing.T) (*browsertest.Stack, *fakeBrowserUse) {
	t.Helper()
	f := newFakeBrowserUse(t)
	return browsertest.NewStack(t, ID, func(log *slog.Logger) providers.Provider { return newProvider(t, f, Options{Logger: log}) }), f
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

	s.CheckSession("bu", v)
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
	p := newProvider(t, f, Options{})
	browsertest.Errors(t, p, p, CredAPIKey, f.Key, func() { f.Mu.Lock(); f.RateLimit = 1; f.Mu.Unlock() })
}

// TestConformance runs the suite's scenarios that need no shell.
func TestConformance(t *testing.T) {
	browsertest.Conformance(t, ID, func(t *testing.T, log *slog.Logger) providertest.Target {
		f := newFakeBrowserUse(t)
		return providertest.Target{Provider: newProvider(t, f, Options{Logger: log}), Credentials: map[string]string{CredAPIKey: f.Key}, Faults: f, Exists: f.exists}
	})
}

// TestProxyAndRecording checks that a browser gets no proxy unless the
// connection names a country (Browser Use's own default is a paid US
// proxy), in Browser Use's form, and is recorded only when the connection
// asks; and that Browser Use's refusals come back as refusals with its
// message.
func TestProxyAndRecording(t *testing.T) {
	f := newFakeBrowserUse(t)
	p := newProvider(t, f, Options{})
	create := func(country string, record bool) (providers.Machine, map[string]any, error) {
		t.Helper()
		spec := providers.Spec{ComputerID: "c", Lease: 5 * time.Minute, Credentials: map[string]string{CredAPIKey: f.Key},
			BrowserProxyCountry: country, BrowserRecording: record}
		m, err := p.Create(t.Context(), spec)
		f.Mu.Lock()
		defer f.Mu.Unlock()
		return m, f.lastCreate, err
	}
	m, body, err := create("", false)
	if v, ok := body["proxyCountryCode"]; err != nil || !ok || v != nil {
		t.Errorf("create by default: %v, body %v; want proxyCountryCode null (no proxy)", err, body)
	}
	if v, ok := body["enableRecording"]; !ok || v != false {
		t.Errorf("create by default: body %v; want enableRecording false", body)
	}
	if got := f.asked()[m.ID]; got != [2]any{false, ""} {
		t.Errorf("the default browser was asked for recording, proxy %v; want neither", got)
	}
	for _, tt := range []struct {
		country, want string
		record        bool
	}{{"de", "de", true}, {"gb", "uk", false}} {
		m, body, err := create(tt.country, tt.record)
		if err != nil || body["proxyCountryCode"] != tt.want || body["enableRecording"] != tt.record {
			t.Errorf("create with country %q, record %v: %v, body %v", tt.country, tt.record, err, body)
		}
		if got := f.asked()[m.ID]; got != [2]any{tt.record, tt.want} {
			t.Errorf("the browser was asked for recording, proxy %v; want %v, %q", got, tt.record, tt.want)
		}
	}

	// A code outside the document's enum is refused by Browser Use: a
	// definite refusal carrying its message, and no browser.
	n := f.count()
	_, _, err = create("zz", false)
	var re *providers.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "proxyCountryCode") {
		t.Errorf("create with an unknown country: %v, want a refusal naming proxyCountryCode", err)
	}
	if f.count() != n {
		t.Errorf("a refused create made a browser")
	}
	// Browser Use answers a timeout over its limit with 403: a refusal,
	// not a refused key.
	f.Mu.Lock()
	f.maxTimeout = 4
	f.Mu.Unlock()
	if _, _, err := create("", false); !errors.As(err, &re) || errors.Is(err, providers.ErrBadCredentials) || !strings.Contains(re.Message, "timeout") {
		t.Errorf("create over the timeout limit: %v, want a refusal with Browser Use's message", err)
	}
}

// TestProxySettingGone checks that BROWSERUSE_PROXY_COUNTRY, which
// connections replaced (browserProxyCountry), is refused when set, naming
// the setting.
func TestProxySettingGone(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "de": false} {
		_, err := providers.New(ID, providers.Config{Getenv: func(k string) string {
			if k == SettingProxyCountry {
				return v
			}
			return ""
		}})
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), SettingProxyCountry) || !strings.Contains(err.Error(), "browserProxyCountry")) {
			t.Errorf("%s=%q: %v, want ok %v", SettingProxyCountry, v, err, ok)
		}
	}
}

// TestFakeChecksBodies checks the fake's rules from Browser Use's
// document: unknown fields, wrong types, values out of bounds or enum, and
// a missing required field are refused.
func TestFakeChecksBodies(t *testing.T) {
	for _, b := range []map[string]any{
		{"timeout": 5, "proxy": false},
		{"timeout": "5"},
		{"timeout": 5.5},
		{"timeout": 241},
		{"proxyCountryCode": "gb"},
		{"profileId": "not-a-uuid"},
		{"enableRecording": nil},
	} {
		raw, _ := json.Marshal(b)
		var body map[string]any
		json.Unmarshal(raw, &body)
		if bad := checkBody(body, createBrowserRules); len(bad) == 0 {
			t.Errorf("create body %s passed", raw)
		}
	}
	if bad := checkBody(map[string]any{"timeout": float64(5), "proxyCountryCode": nil, "enableRecording": false}, createBrowserRules); len(bad) != 0 {
		t.Errorf("a conforming create body: %v", bad)
	}
	for _, b := range []map[string]any{{}, {"action": "pause"}, {"action": "stop", "force": true}} {
		if bad := checkBody(b, updateBrowserRules); len(bad) == 0 {
			t.Errorf("update body %v passed", b)
		}
	}
}
