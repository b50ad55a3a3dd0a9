package browserbase

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

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

var _ supervisor.BrowserSession = (*Browserbase)(nil)

// newProvider is the provider against f, with o's other options.
func newProvider(t testing.TB, f *fakeBrowserbase, o Options) *Browserbase {
	t.Helper()
	o.APIURL = f.srv.URL
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newStack is a supervisor behind its REST API with this provider against
// a fake Browserbase.
func newStack(t *testing.T) (*browsertest.Stack, *fakeBrowserbase) {
	t.Helper()
	f := newFakeBrowserbase(t)
	return browsertest.NewStack(t, ID, func(log *slog.Logger) providers.Provider { return newProvider(t, f, Options{Logger: log}) }), f
}

// TestBrowserSession starts a session through the supervisor, drives the
// browser behind its CDP URL with chromedp to a page on loopback, checks
// that exec and the file tools are refused, and stops it; neither the API
// key nor the CDP URL's signing key is logged.
func TestBrowserSession(t *testing.T) {
	s, f := newStack(t)
	s.Connect("bb", map[string]string{CredAPIKey: f.Key, CredProjectID: "proj-1"}, 300)
	v := s.Start("bb", "ws://127.0.0.1:")
	f.Mu.Lock()
	body := f.lastCreate
	f.Mu.Unlock()
	if body["keepAlive"] != true || body["timeout"] != float64(300) || body["projectId"] != "proj-1" {
		t.Errorf("create body %v: want keepAlive, the lease as timeout and the projectId", body)
	}
	if bs, _ := body["browserSettings"].(map[string]any); bs["recordSession"] != false {
		t.Errorf("create body %v: want browserSettings.recordSession false", body)
	}
	if meta, _ := body["userMetadata"].(map[string]any); meta[providers.LabelManaged] != "true" || meta[providers.LabelAgent] != "bb" {
		t.Errorf("userMetadata %v", body["userMetadata"])
	}
	keys := f.signingKeys()
	if len(keys) != 1 || !strings.HasSuffix(v.Browser.CDPURL, "?signingKey="+keys[0]) {
		t.Errorf("CDP URL %q, want the session's connectUrl with its signing key", v.Browser.CDPURL)
	}

	s.CheckSession("bb", v)
	if ok, _ := f.exists(t.Context(), providers.LabelAgent, "bb"); ok {
		t.Errorf("the session still runs after stop")
	}
	s.RequireNotLogged(map[string]string{"the API key": f.Key, "the CDP URL's signing key": keys[0]})
}

// TestLostCreateReply loses the create's reply: the session is found by
// its attempt label and adopted, and no second browser starts.
func TestLostCreateReply(t *testing.T) {
	s, f := newStack(t)
	s.Connect("lost", map[string]string{CredAPIKey: f.Key}, 0)
	f.LoseNextCreateReply()
	s.Start("lost", "ws://127.0.0.1:")
	if n := f.count(); n != 1 {
		t.Errorf("%d sessions at Browserbase, want 1", n)
	}
	if code, raw := s.Call("POST", "/v1/agents/lost/computer/stop", nil); code != 200 {
		t.Errorf("stop: %d %s", code, raw)
	}
}

// TestReconcile restarts the supervisor with a running session and a
// leftover whose release kept failing: reconciliation keeps the first,
// found by its user metadata, and releases the second.
func TestReconcile(t *testing.T) {
	s, f := newStack(t)
	for _, a := range []string{"rec", "left"} {
		s.Connect(a, map[string]string{CredAPIKey: f.Key}, 0)
		s.Start(a, "ws://127.0.0.1:")
	}
	f.FailNextDeletes(1)
	s.Call("POST", "/v1/agents/left/computer/stop", nil)
	if code, raw := s.Call("POST", "/v1/agents/left/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}); code != 200 {
		t.Fatalf("confirm-cleanup: %d %s", code, raw)
	}
	if ok, _ := f.exists(t.Context(), providers.LabelAgent, "left"); !ok {
		t.Fatalf("the leftover session is not running at Browserbase")
	}
	rep, err := s.Restart().Reconcile(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kept != 1 || rep.Destroyed != 1 || rep.Vanished != 0 {
		t.Errorf("reconcile: %+v, want the running session kept and the leftover released", rep)
	}
	if ok, _ := f.exists(t.Context(), providers.LabelAgent, "left"); ok {
		t.Errorf("the leftover session still runs after reconcile")
	}
	if ok, _ := f.exists(t.Context(), providers.LabelAgent, "rec"); !ok {
		t.Errorf("reconcile released the running session")
	}
	s.Call("POST", "/v1/agents/rec/computer/stop", nil)
}

// TestErrors maps Browserbase's answers.
func TestErrors(t *testing.T) {
	f := newFakeBrowserbase(t)
	p := newProvider(t, f, Options{})
	browsertest.Errors(t, p, p, CredAPIKey, f.Key, func() { f.Mu.Lock(); f.RateLimit = 1; f.Mu.Unlock() })
}

// TestLiveViewFailure fails the live-view call of a create whose session
// started: the create fails and the session is released, not left to run
// until its timeout.
func TestLiveViewFailure(t *testing.T) {
	f := newFakeBrowserbase(t)
	p := newProvider(t, f, Options{})
	f.Mu.Lock()
	f.failDebug = 1
	f.Mu.Unlock()
	spec := providers.Spec{ComputerID: "c", AgentID: "lv", Lease: time.Minute, Credentials: map[string]string{CredAPIKey: f.Key}}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrUnavailable) {
		t.Fatalf("create with a failing live view: %v, want an outage", err)
	}
	if n := f.count(); n != 1 {
		t.Fatalf("%d sessions at Browserbase, want the 1 that started", n)
	}
	if ok, _ := f.exists(t.Context(), providers.LabelAgent, "lv"); ok {
		t.Errorf("the session of the failed create still runs")
	}
}

// TestConformance runs the suite's scenarios that need no shell.
func TestConformance(t *testing.T) {
	browsertest.Conformance(t, ID, func(t *testing.T, log *slog.Logger) providertest.Target {
		f := newFakeBrowserbase(t)
		return providertest.Target{Provider: newProvider(t, f, Options{Logger: log}), Credentials: map[string]string{CredAPIKey: f.Key}, Faults: f, Exists: f.exists}
	})
}

// TestRecordingAndProxy checks that sessions are not recorded and use no
// proxy unless the connection asks (Browserbase records by default), that
// a country becomes a browserbase proxy's geolocation in Browserbase's
// form, and that a 400 is a refusal carrying Browserbase's message.
func TestRecordingAndProxy(t *testing.T) {
	f := newFakeBrowserbase(t)
	p := newProvider(t, f, Options{})
	for _, tt := range []struct {
		record             bool
		country, wantProxy string
	}{{false, "", ""}, {true, "", ""}, {false, "de", "DE"}, {true, "uk", "GB"}} {
		spec := providers.Spec{ComputerID: "c", AgentID: "rec", Lease: time.Minute, Credentials: map[string]string{CredAPIKey: f.Key},
			BrowserRecording: tt.record, BrowserProxyCountry: tt.country}
		m, err := p.Create(t.Context(), spec)
		if err != nil {
			t.Fatalf("create (record %v, country %q): %v", tt.record, tt.country, err)
		}
		if got := f.recorded()[m.ID]; got != tt.record {
			t.Errorf("BrowserRecording %v: the session is recorded: %v", tt.record, got)
		}
		if got := f.proxied()[m.ID]; got != tt.wantProxy {
			t.Errorf("BrowserProxyCountry %q: the session's proxy is %q, want %q", tt.country, got, tt.wantProxy)
		}
		f.Mu.Lock()
		_, sent := f.lastCreate["proxies"]
		f.Mu.Unlock()
		if sent != (tt.country != "") {
			t.Errorf("BrowserProxyCountry %q: proxies sent: %v", tt.country, sent)
		}
		if err := p.Destroy(providers.WithCredentials(t.Context(), spec.Credentials), m.ID); err != nil {
			t.Fatal(err)
		}
	}

	spec := providers.Spec{ComputerID: "c", AgentID: "rec", Lease: time.Minute, Credentials: map[string]string{CredAPIKey: f.Key}}
	n := f.count()
	f.Mu.Lock()
	f.refuseCreate = "keepAlive is not available on this plan"
	f.Mu.Unlock()
	_, err := p.Create(t.Context(), spec)
	var re *providers.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "keepAlive is not available") || errors.Is(err, providers.ErrBadImage) {
		t.Errorf("create answered 400: %v, want a refusal with Browserbase's message", err)
	}
	if f.count() != n {
		t.Errorf("a refused create made a session")
	}
}

// TestFakeChecksBodies checks the fake's rules from Browserbase's API
// reference: unknown fields, wrong types, values out of bounds or enum,
// and missing required fields are refused.
func TestFakeChecksBodies(t *testing.T) {
	for _, b := range []string{
		`{"keepAlive": true, "record": false}`,
		`{"timeout": 30}`,
		`{"timeout": 600.5}`,
		`{"keepAlive": "yes"}`,
		`{"region": "eu-west-1"}`,
		`{"browserSettings": {"recordSession": "false"}}`,
		`{"browserSettings": {"recording": false}}`,
		`{"browserSettings": {"context": {"persist": true}}}`,
		`{"browserSettings": {"os": "beos"}}`,
		`{"proxies": [{"type": "tor"}]}`,
		`{"proxies": [{"type": "browserbase", "geolocation": {"city": "Berlin"}}]}`,
		`{"proxies": [{"type": "browserbase", "geolocation": {"country": "de"}}]}`,
		`{"proxies": [{"type": "browserbase", "geolocation": {"country": "DEU"}}]}`,
		`{"proxies": "yes"}`,
		`{"userMetadata": ["a"]}`,
	} {
		var body any
		json.Unmarshal([]byte(b), &body)
		if bad := checkValue("body", body, createSessionRules); bad == "" {
			t.Errorf("create body %s passed", b)
		}
	}
	var ok any
	json.Unmarshal([]byte(`{"keepAlive": true, "timeout": 300, "projectId": "p", "userMetadata": {"a": "b"}, "browserSettings": {"recordSession": false}, "proxies": false}`), &ok)
	if bad := checkValue("body", ok, createSessionRules); bad != "" {
		t.Errorf("a conforming create body: %s", bad)
	}
	json.Unmarshal([]byte(`{"keepAlive": true, "browserSettings": {"recordSession": true}, "proxies": [{"type": "browserbase", "geolocation": {"country": "DE"}}]}`), &ok)
	if bad := checkValue("body", ok, createSessionRules); bad != "" {
		t.Errorf("a conforming create body: %s", bad)
	}
	for _, b := range []string{`{}`, `{"status": "STOP"}`, `{"status": "REQUEST_RELEASE", "force": true}`} {
		var body any
		json.Unmarshal([]byte(b), &body)
		if bad := checkValue("body", body, updateSessionRules); bad == "" {
			t.Errorf("update body %s passed", b)
		}
	}
}

// TestRecordSettingGone checks that BROWSERBASE_RECORD_SESSIONS, which
// connections replaced (browserRecording), is refused when it asks for
// recording, naming the setting, and accepted unset or false.
func TestRecordSettingGone(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "false": true, "true": false, "sometimes": false} {
		_, err := providers.New(ID, providers.Config{Getenv: func(k string) string {
			if k == SettingRecordSessions {
				return v
			}
			return ""
		}})
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), SettingRecordSessions) || !strings.Contains(err.Error(), "browserRecording")) {
			t.Errorf("%s=%q: %v, want ok %v", SettingRecordSessions, v, err, ok)
		}
	}
}

// TestConnectionOptions goes through the supervisor's REST API: a
// connection's browserRecording and browserProxyCountry are shown by its
// GET and reach Browserbase at start; a connection without them gets a
// session neither recorded nor proxied; a malformed country is refused
// naming the field.
func TestConnectionOptions(t *testing.T) {
	s, f := newStack(t)
	creds := map[string]string{CredAPIKey: f.Key}
	s.ConnectWith("opts", creds, map[string]any{"browserRecording": true, "browserProxyCountry": "de"})
	s.Connect("plain", creds, 0)

	code, raw := s.Call("GET", "/v1/agents/opts/computer", nil)
	var st struct {
		Connection api.Connection `json:"connection"`
	}
	if err := json.Unmarshal(raw, &st); code != 200 || err != nil || !st.Connection.BrowserRecording || st.Connection.BrowserProxyCountry != "de" {
		t.Errorf("GET the connection: %d %s; want browserRecording true, browserProxyCountry de", code, raw)
	}
	code, raw = s.Call("GET", "/v1/agents/plain/computer", nil)
	if code != 200 || strings.Contains(string(raw), "browserRecording") || strings.Contains(string(raw), "browserProxyCountry") {
		t.Errorf("GET a connection without options: %d %s; want neither option shown", code, raw)
	}

	for agent, want := range map[string][2]any{"opts": {true, "DE"}, "plain": {false, ""}} {
		s.Start(agent, "ws://127.0.0.1:")
		if got := f.askedBy(agent); got != want {
			t.Errorf("agent %s: the session was asked for recording, proxy %v; want %v", agent, got, want)
		}
		s.Call("POST", "/v1/agents/"+agent+"/computer/stop", nil)
	}

	for _, bad := range []string{"DE", "deu", "d", "1e"} {
		s.Call("POST", "/v1/agents", map[string]any{"id": "bad", "name": "bad"})
		code, raw := s.Call("POST", "/v1/computers", map[string]any{"agent": "bad", "provider": ID, "credentials": creds, "browserProxyCountry": bad})
		if code != 400 || !strings.Contains(string(raw), "browserProxyCountry") {
			t.Errorf("browserProxyCountry %q: %d %s; want 400 naming the field", bad, code, raw)
		}
	}
}
