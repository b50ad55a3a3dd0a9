package liveview_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/liveview"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(pgtest.Wrap(m)) }

const turnSecret = "liveview-test-turn-secret"

// openSQLite opens a new store in the test's directory.
func openSQLite(t *testing.T) store.Store {
	t.Helper()
	return openSQLiteAt(t, filepath.Join(t.TempDir(), "berth.db"))
}

func openSQLiteAt(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := sqlstore.OpenSQLite(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T, url string) store.Store {
	t.Helper()
	st, err := sqlstore.OpenPostgres(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// addSession records x in the store as the supervisor would: its agent
// and connection, the reservation, then the running computer.
func addSession(t *testing.T, st store.Store, x store.Session, now time.Time) {
	t.Helper()
	ctx := t.Context()
	if err := st.CreateAgent(ctx, store.Agent{ID: x.AgentID, Name: x.AgentID, Workspace: "default", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateConnection(ctx, store.Connection{AgentID: x.AgentID, Provider: x.Provider, Image: x.Image,
		LeaseSeconds: 900, DailySeconds: 3600, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Reserve(ctx, store.Reservation{
		Session:    store.Session{ID: x.ID, AgentID: x.AgentID, ComputerID: x.ComputerID, AttemptID: "a-" + x.ID, Image: x.Image},
		Now:        now,
		MinSeconds: 60,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.State, r.MachineID, r.Endpoint, r.ExpiresAt = x.State, x.MachineID, x.Endpoint, x.ExpiresAt
	if err := st.UpdateSession(ctx, r, store.StateStarting); err != nil {
		t.Fatal(err)
	}
}

// computer stands for a desktop computer's computerd: it checks the
// computer's token and records the offers and warm requests it gets.
type computer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	offers []desktop.OfferRequest
	warms  int
}

func newComputer(t *testing.T, tok string) *computer {
	c := &computer{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+tok {
			w.WriteHeader(401)
			io.WriteString(w, `{"error":{"code":"unauthorized","message":"wrong token"}}`)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case desktop.PathWarm:
			c.warms++
			io.WriteString(w, `{}`)
		case desktop.PathOffer:
			var req desktop.OfferRequest
			json.NewDecoder(r.Body).Decode(&req)
			c.offers = append(c.offers, req)
			json.NewEncoder(w).Encode(desktop.OfferAnswer{SDP: "v=0 answer", Codec: "h264", Viewer: req.Viewer})
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(c.srv.Close)
	return c
}

type fixture struct {
	m     *liveview.Manager
	srv   *httptest.Server
	clk   *clock.Fake
	st    store.Store
	comp  *computer
	toks  *token.Deriver
	start time.Time
}

func newFixture(t *testing.T, users int) *fixture {
	t.Helper()
	return newFixtureWith(t, users, nil)
}

// newFixtureWith is newFixture with a transport to computers (nil:
// straight). Its store holds the
// desktop sessions s1 (of agent a1) and s2 (a2), and the headless s3 (a3).
func newFixtureWith(t *testing.T, users int, tr transportFunc) *fixture {
	t.Helper()
	f := newFixtureOn(t, users, tr, openSQLite(t))
	for _, x := range []store.Session{
		{ID: "s1", AgentID: "a1", ComputerID: "c1", Image: providers.ImageDesktop},
		{ID: "s2", AgentID: "a2", ComputerID: "c2", Image: providers.ImageDesktop},
		{ID: "s3", AgentID: "a3", ComputerID: "c3", Image: providers.ImageHeadless},
	} {
		x.State, x.Provider, x.Endpoint, x.ExpiresAt = store.StateRunning, "docker", f.comp.srv.URL, f.start.Add(10*time.Minute)
		addSession(t, f.st, x, f.start)
	}
	return f
}

// newFixtureOn is a supervisor's live view on st, which may be shared
// with other fixtures; it adds no sessions.
func newFixtureOn(t *testing.T, users int, tr transportFunc, st store.Store) *fixture {
	t.Helper()
	toks, err := token.NewDeriver([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := &fixture{clk: clock.NewFake(now), toks: toks, start: now, st: st}
	f.comp = newComputer(t, toks.Derive(token.Computer, "c1"))
	f.m, err = liveview.New(liveview.Config{
		Store: f.st, Tokens: toks, Transport: tr, TURNSecret: []byte(turnSecret), ViewerTURN: []string{"turn:192.0.2.1:3478?transport=udp"},
		DesktopUsers: users, TokenTTL: time.Minute, Clock: f.clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.m.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) issue(t *testing.T, agent string) liveview.Grant {
	t.Helper()
	g, err := f.m.Issue(context.Background(), agent, f.srv.URL)
	if err != nil {
		t.Fatalf("issue for %s: %v", agent, err)
	}
	return g
}

// post calls a signalling endpoint and returns the status and body.
func (f *fixture) post(t *testing.T, session, what, tok, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(f.srv.URL+"/view/"+session+"/"+what+"?token="+url.QueryEscape(tok), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) page(t *testing.T, session, tok string) int {
	t.Helper()
	resp, err := http.Get(f.srv.URL + "/view/" + session + "?token=" + url.QueryEscape(tok))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestGrantAndPage(t *testing.T) {
	f := newFixture(t, 2)
	g := f.issue(t, "a1")
	if g.Session != "s1" || !strings.HasPrefix(g.URL, f.srv.URL+"/view/s1?token=") || g.Viewers != 1 || g.DesktopUsers != 2 {
		t.Fatalf("grant %+v", g)
	}
	if st := f.page(t, "s1", g.Token); st != 200 {
		t.Fatalf("page: %d", st)
	}
	// The encoder is warmed when the link is issued.
	testkit.Eventually(t, 5*time.Second, "one warm request", func() bool {
		f.comp.mu.Lock()
		defer f.comp.mu.Unlock()
		return f.comp.warms == 1
	})
}

// TestTokenOfAnotherSession: a token works only on its own session.
func TestTokenOfAnotherSession(t *testing.T) {
	f := newFixture(t, 2)
	g2 := f.issue(t, "a2")
	if st := f.page(t, "s1", g2.Token); st != 403 {
		t.Errorf("page of s1 with a token of s2: %d, want 403", st)
	}
	for _, what := range []string{"config", "offer", "renew", "leave"} {
		if st, body := f.post(t, "s1", what, g2.Token, `{"sdp":"v=0"}`); st != 403 || !strings.Contains(body, "another session") {
			t.Errorf("%s on s1 with a token of s2: %d %s, want 403", what, st, body)
		}
	}
	f.comp.mu.Lock()
	defer f.comp.mu.Unlock()
	if len(f.comp.offers) != 0 {
		t.Errorf("an offer reached the computer with another session's token")
	}
}

func TestTokenRefusals(t *testing.T) {
	f := newFixture(t, 2)
	g := f.issue(t, "a1")
	forged := g.Token[:len(g.Token)-4] + "AAAA"
	for name, tok := range map[string]string{"empty": "", "forged": forged, "garbage": "v1.a.b.c.d"} {
		if st := f.page(t, "s1", tok); st != 403 {
			t.Errorf("%s token: %d, want 403", name, st)
		}
	}
	// Renewed before it expires, the seat lives on with the new token.
	f.clk.Advance(40 * time.Second)
	st, body := f.post(t, "s1", "renew", g.Token, "")
	if st != 200 {
		t.Fatalf("renew: %d %s", st, body)
	}
	var r struct{ Token string }
	json.Unmarshal([]byte(body), &r)
	f.clk.Advance(40 * time.Second) // the first token has expired
	if st := f.page(t, "s1", g.Token); st != 403 {
		t.Errorf("expired token: %d, want 403", st)
	}
	if st := f.page(t, "s1", r.Token); st != 200 {
		t.Errorf("renewed token: %d, want 200", st)
	}
	// After leaving, the token is refused.
	if st, _ := f.post(t, "s1", "leave", r.Token, ""); st != 204 {
		t.Errorf("leave: %d", st)
	}
	if st := f.page(t, "s1", r.Token); st != 403 {
		t.Errorf("token after leave: %d, want 403", st)
	}
}

// TestDesktopBusy: DESKTOP_USERS viewers at once; a seat frees when its
// viewer leaves or its token runs out.
func TestDesktopBusy(t *testing.T) {
	f := newFixture(t, 1)
	g := f.issue(t, "a1")
	_, err := f.m.Issue(context.Background(), "a1", f.srv.URL)
	e := supervisor.AsError(err)
	if e.Status != 409 || e.Code != liveview.CodeDesktopBusy || !strings.Contains(e.Message, "DESKTOP_USERS is 1") {
		t.Fatalf("second viewer: %+v, want 409 desktop_busy naming the limit", e)
	}
	// Another computer's desktop is not affected.
	f.issue(t, "a2")
	f.post(t, "s1", "leave", g.Token, "")
	g = f.issue(t, "a1")
	f.clk.Advance(61 * time.Second)
	f.issue(t, "a1")
}

func TestNotViewable(t *testing.T) {
	f := newFixture(t, 2)
	for agent, code := range map[string]string{"a3": liveview.CodeNotDesktop, "nobody": supervisor.CodeNoSession} {
		_, err := f.m.Issue(context.Background(), agent, f.srv.URL)
		if e := supervisor.AsError(err); e.Status != 409 || e.Code != code {
			t.Errorf("%s: %+v, want 409 %s", agent, e, code)
		}
	}
}

// TestOffer: the viewer gets relay-only TURN credentials of its own; its
// offer reaches the computer with the computer's token and credentials of
// the computer's own, both valid for TURN_SECRET and at most 10 minutes.
func TestOffer(t *testing.T) {
	f := newFixture(t, 2)
	g := f.issue(t, "a1")
	st, body := f.post(t, "s1", "config", g.Token, "")
	if st != 200 {
		t.Fatalf("config: %d %s", st, body)
	}
	var cfg liveview.ICEConfig
	json.Unmarshal([]byte(body), &cfg)
	if cfg.ICETransportPolicy != "relay" || len(cfg.ICEServers) != 1 || cfg.ICEServers[0].URLs[0] != "turn:192.0.2.1:3478?transport=udp" {
		t.Fatalf("config %+v", cfg)
	}
	checkTURN(t, f, cfg.ICEServers[0].Username, cfg.ICEServers[0].Credential, "v."+g.Viewer)

	for _, bad := range []string{`{}`, `{"sdp":"v=0","codec":"av1"}`, `{"sdp":1}`, `{"sdp":"v=0","extra":1}`} {
		if st, body := f.post(t, "s1", "offer", g.Token, bad); st != 400 {
			t.Errorf("offer %s: %d %s, want 400", bad, st, body)
		}
	}
	st, body = f.post(t, "s1", "offer", g.Token, `{"sdp":"v=0 offer"}`)
	if st != 200 || !strings.Contains(body, "v=0 answer") {
		t.Fatalf("offer: %d %s", st, body)
	}
	f.comp.mu.Lock()
	defer f.comp.mu.Unlock()
	if len(f.comp.offers) != 1 {
		t.Fatalf("offers at the computer: %d", len(f.comp.offers))
	}
	o := f.comp.offers[0]
	if o.SDP != "v=0 offer" || o.Viewer != g.Viewer || len(o.ICEServers) != 1 || len(o.ICEServers[0].URLs) != 0 {
		t.Fatalf("forwarded offer %+v", o)
	}
	checkTURN(t, f, o.ICEServers[0].Username, o.ICEServers[0].Credential, "c.c1."+g.Viewer)
}

func checkTURN(t *testing.T, f *fixture, user, pass, id string) {
	t.Helper()
	exp, got, ok := strings.Cut(user, ":")
	if !ok || got != id {
		t.Errorf("TURN username %q, want expiry:%s", user, id)
	}
	var sec int64
	json.Unmarshal([]byte(exp), &sec)
	if d := time.Unix(sec, 0).Sub(f.clk.Now()); d <= 0 || d > 10*time.Minute {
		t.Errorf("TURN credential lives %v, want at most 10 min", d)
	}
	mac := hmac.New(sha1.New, []byte(turnSecret))
	mac.Write([]byte(user))
	if want := base64.StdEncoding.EncodeToString(mac.Sum(nil)); pass != want {
		t.Errorf("TURN password is not base64 HMAC-SHA1 of the username")
	}
}

// ownerGet opens an owner link without following its redirect.
func (f *fixture) ownerGet(t *testing.T, session, key string) *http.Response {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(f.srv.URL + "/view/" + session + "/owner?key=" + url.QueryEscape(key))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestOwnerLink: the owner link of a lent desktop (lending.OwnerViewKey
// under the computer's token) takes a seat like any viewer link and
// redirects to the viewer page with a working view token; a wrong key, a
// key of another session, an unknown session and a full desktop are
// refused.
func TestOwnerLink(t *testing.T) {
	f := newFixture(t, 1)
	key := lending.OwnerViewKey(f.toks.Derive(token.Computer, "c1"), "s1")
	resp := f.ownerGet(t, "s1", key)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/view/s1?token=") {
		t.Fatalf("owner link: %d %q, want 303 to /view/s1?token=...", resp.StatusCode, loc)
	}
	u, _ := url.Parse(loc)
	if st := f.page(t, "s1", u.Query().Get("token")); st != 200 {
		t.Fatalf("page with the owner's token: %d", st)
	}
	// The owner holds the only seat (DESKTOP_USERS is 1).
	if resp := f.ownerGet(t, "s1", key); resp.StatusCode != http.StatusConflict {
		t.Errorf("owner link on a full desktop: %d, want 409", resp.StatusCode)
	}
	if _, err := f.m.Issue(context.Background(), "a1", f.srv.URL); supervisor.AsError(err).Code != liveview.CodeDesktopBusy {
		t.Errorf("a viewer link past the owner's seat: %v, want desktop_busy", err)
	}
	for name, c := range map[string]struct{ session, key string }{
		"wrong key":        {"s2", key[:len(key)-2] + "AA"},
		"another session":  {"s2", key},
		"unknown session":  {"s9", key},
		"empty key":        {"s2", ""},
		"another computer": {"s2", lending.OwnerViewKey(f.toks.Derive(token.Computer, "c1"), "s2")},
	} {
		if resp := f.ownerGet(t, c.session, c.key); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	// A headless session has no screen, even with its own key.
	if resp := f.ownerGet(t, "s3", lending.OwnerViewKey(f.toks.Derive(token.Computer, "c3"), "s3")); resp.StatusCode != http.StatusConflict {
		t.Errorf("owner link of a headless session: %d, want 409", resp.StatusCode)
	}
}

type transportFunc = func(ctx context.Context, x store.Session) (*http.Client, http.Header, error)

// relayed stands for a provider's transport (a lender's relay link, a
// tunnel, a hosted sandbox's proxy): the computers' endpoints resolve
// nowhere, and only the transport reaches the test computer. Like the
// tunnel provider's, it puts the connection's key in place of the
// supervisor's token.
type relayed struct {
	to  string // the computer's real address
	key string // the connection's key, sent as the bearer token
	mu  sync.Mutex
	got []string // the sessions it carried a call for
}

func (p *relayed) transport(_ context.Context, x store.Session) (*http.Client, http.Header, error) {
	if x.Provider != "tunnel" {
		return nil, nil, &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable,
			Message: fmt.Sprintf("provider %q is not configured on this supervisor", x.Provider)}
	}
	p.mu.Lock()
	p.got = append(p.got, x.ID)
	p.mu.Unlock()
	return &http.Client{Transport: p}, nil, nil
}

func (p *relayed) RoundTrip(r *http.Request) (*http.Response, error) {
	u, _ := url.Parse(p.to)
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
	r.Header.Set("Authorization", "Bearer "+p.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestRelayedDesktop: a desktop session of a provider with a transport of
// its own (a lent machine, a tunnel, a hosted sandbox) is signalled
// through Config.Transport, which carries the connection's credentials; a
// transport that fails is the signalling's error, and nothing reaches the
// computer.
func TestRelayedDesktop(t *testing.T) {
	p := &relayed{key: "connection-key-0123"}
	f := newFixtureWith(t, 2, p.transport)
	addSession(t, f.st, store.Session{ID: "s5", AgentID: "a5", ComputerID: "c5", State: store.StateRunning, Image: providers.ImageDesktop, Provider: "tunnel",
		MachineID: "tunnel-1", Endpoint: "http://runner.invalid", ExpiresAt: f.start.Add(10 * time.Minute)}, f.start)
	addSession(t, f.st, store.Session{ID: "s6", AgentID: "a6", ComputerID: "c6", State: store.StateRunning, Image: providers.ImageDesktop, Provider: "gone",
		Endpoint: "http://runner.invalid", ExpiresAt: f.start.Add(10 * time.Minute)}, f.start)
	f.comp = newComputer(t, p.key)
	p.to = f.comp.srv.URL

	g := f.issue(t, "a5")
	st, body := f.post(t, "s5", "offer", g.Token, `{"sdp":"v=0 offer"}`)
	if st != 200 || !strings.Contains(body, "v=0 answer") {
		t.Fatalf("offer to a tunnelled desktop: %d %s", st, body)
	}
	f.comp.mu.Lock()
	n := len(f.comp.offers)
	f.comp.mu.Unlock()
	if n != 1 {
		t.Errorf("offers at the tunnelled computer: %d, want 1", n)
	}
	p.mu.Lock()
	got := slices.Clone(p.got)
	p.mu.Unlock()
	if !slices.Contains(got, "s5") {
		t.Errorf("sessions carried by the transport: %v, want s5", got)
	}

	g6 := f.issue(t, "a6")
	if st, body := f.post(t, "s6", "offer", g6.Token, `{"sdp":"v=0 offer"}`); st != http.StatusServiceUnavailable || !strings.Contains(body, `provider \"gone\"`) {
		t.Errorf("offer through a failing transport: %d %s, want 503 naming the provider", st, body)
	}
	f.comp.mu.Lock()
	n = len(f.comp.offers)
	f.comp.mu.Unlock()
	if n != 1 {
		t.Errorf("offers at the computer after a failing transport: %d, want still 1", n)
	}
}

// TestSeatsAcrossSupervisors: two supervisors share one store (two
// stores on one SQLite file, and two on one PostgreSQL database), each
// with its own live view. DESKTOP_USERS counts the viewers of both: past
// it, either one answers desktop_busy; a seat taken through one is good,
// renewed and freed through the other; viewers arriving at both at once
// get exactly the seats there are.
func TestSeatsAcrossSupervisors(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) (store.Store, store.Store){
		"sqlite": func(t *testing.T) (store.Store, store.Store) {
			path := filepath.Join(t.TempDir(), "berth.db")
			return openSQLiteAt(t, path), openSQLiteAt(t, path)
		},
		"postgres": func(t *testing.T) (store.Store, store.Store) {
			url := pgtest.Start(t)
			return openPostgres(t, url), openPostgres(t, url)
		},
	} {
		t.Run(name, func(t *testing.T) {
			st1, st2 := open(t)
			f1 := newFixtureOn(t, 2, nil, st1)
			f2 := newFixtureOn(t, 2, nil, st2)
			addSession(t, st1, store.Session{ID: "s1", AgentID: "a1", ComputerID: "c1", State: store.StateRunning, Image: providers.ImageDesktop,
				Provider: "docker", Endpoint: f1.comp.srv.URL, ExpiresAt: f1.start.Add(10 * time.Minute)}, f1.start)
			testSeatsAcross(t, f1, f2)
		})
	}
}

func testSeatsAcross(t *testing.T, f1, f2 *fixture) {
	ctx := t.Context()
	advance := func(d time.Duration) { f1.clk.Advance(d); f2.clk.Advance(d) }
	busy := func(f *fixture, which string) {
		t.Helper()
		_, err := f.m.Issue(ctx, "a1", f.srv.URL)
		if e := supervisor.AsError(err); e.Status != 409 || e.Code != liveview.CodeDesktopBusy ||
			!strings.Contains(e.Message, "already has 2 viewers (DESKTOP_USERS is 2)") {
			t.Fatalf("a viewer at %s past two seats: %+v, want 409 desktop_busy naming 2 viewers and the limit", which, e)
		}
	}

	g1 := f1.issue(t, "a1")
	g2 := f2.issue(t, "a1")
	if g1.Viewers != 1 || g2.Viewers != 2 {
		t.Fatalf("viewers: %d at the first supervisor, then %d at the second; want 1, then 2 counted across both", g1.Viewers, g2.Viewers)
	}
	busy(f2, "the second supervisor")
	busy(f1, "the first supervisor")

	// A seat taken at one supervisor is seen, renewed and freed at the other.
	if st := f2.page(t, "s1", g1.Token); st != 200 {
		t.Fatalf("the second supervisor's page with the first's token: %d, want 200", st)
	}
	advance(40 * time.Second)
	st, body := f2.post(t, "s1", "renew", g1.Token, "")
	if st != 200 {
		t.Fatalf("renew at the second supervisor: %d %s", st, body)
	}
	var r struct{ Token string }
	json.Unmarshal([]byte(body), &r)
	advance(40 * time.Second) // g2's seat lapsed; g1's lives on, renewed
	if st := f1.page(t, "s1", r.Token); st != 200 {
		t.Fatalf("the first supervisor's page with the renewed token: %d, want 200", st)
	}
	if st := f1.page(t, "s1", g2.Token); st != 403 {
		t.Errorf("a lapsed seat's token at the first supervisor: %d, want 403", st)
	}
	g3 := f1.issue(t, "a1") // takes the lapsed seat
	if g3.Viewers != 2 {
		t.Errorf("viewers after a seat lapsed and was taken again: %d, want 2", g3.Viewers)
	}
	busy(f2, "the second supervisor")
	if st, _ := f2.post(t, "s1", "leave", r.Token, ""); st != 204 {
		t.Fatalf("leave at the second supervisor: %d", st)
	}
	if st := f1.page(t, "s1", r.Token); st != 403 {
		t.Errorf("a token after leaving at the other supervisor: %d, want 403", st)
	}
	if st, body := f1.post(t, "s1", "renew", r.Token, ""); st != 403 {
		t.Errorf("renew after leaving at the other supervisor: %d %s, want 403", st, body)
	}

	// The seat left free goes to exactly one of many viewers arriving at
	// both supervisors at once.
	const viewers = 16
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		seated int
	)
	start := make(chan struct{})
	for i := range viewers {
		f := []*fixture{f1, f2}[i%2]
		wg.Go(func() {
			<-start
			_, err := f.m.Issue(ctx, "a1", f.srv.URL)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				seated++
			} else if e := supervisor.AsError(err); e.Code != liveview.CodeDesktopBusy {
				t.Errorf("viewer %d: %v, want a seat or desktop_busy", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if seated != 1 {
		t.Errorf("%d of %d viewers at two supervisors got the one free seat, want 1", seated, viewers)
	}
	// No warm-up may outlive the test.
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%d warm requests", 3+seated), func() bool {
		f1.comp.mu.Lock()
		defer f1.comp.mu.Unlock()
		return f1.comp.warms >= 3+seated
	})
}
