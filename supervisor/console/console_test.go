package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/browserbase"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/console"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/supervisortest"
)

// env is a real supervisor on the fake provider with the console and the
// API served as the daemon serves them.
type env struct {
	t   *testing.T
	sup *supervisortest.Supervisor
	srv *httptest.Server
	clk *clock.Fake
}

func newEnv(t *testing.T, tls bool) *env {
	t.Helper()
	sup := supervisortest.Start(t, supervisortest.Options{})
	// The console's clock moves only for session expiry; it starts at the
	// Service's (real) time, so that usage days agree.
	clk := clock.NewFake(time.Now())
	con, err := console.New(console.Options{
		Service: sup.Service, Store: sup.Store, Token: sup.Token, Clock: clk,
		Providers: map[string]providers.Provider{fake.ID: sup.Fake}, DefaultProvider: fake.ID,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := apiserver.New(sup.Service, sup.Token, nil)
	con.SetLink(h.Link)
	h.Console = con
	e := &env{t: t, sup: sup, clk: clk}
	if tls {
		e.srv = httptest.NewTLSServer(h)
	} else {
		e.srv = httptest.NewServer(h)
	}
	t.Cleanup(e.srv.Close)
	return e
}

// browser is a client with its own cookies that does not follow redirects.
type browser struct {
	e    *env
	c    *http.Client
	csrf string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	c := e.srv.Client()
	cc := *c
	cc.Jar = jar
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{e: e, c: &cc}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) do(req *http.Request) (*http.Response, string) {
	b.e.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if m := csrfRE.FindSubmatch(body); m != nil {
		b.csrf = string(m[1])
	}
	return res, string(body)
}

func (b *browser) get(path string) (*http.Response, string) {
	b.e.t.Helper()
	req, _ := http.NewRequest("GET", b.e.srv.URL+path, nil)
	return b.do(req)
}

// post sends a form; it adds the session's CSRF token unless form has one.
func (b *browser) post(path string, form url.Values, header ...string) (*http.Response, string) {
	b.e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok && b.csrf != "" {
		form.Set("csrf", b.csrf)
	}
	req, _ := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return b.do(req)
}

// signIn signs in with key and loads the Computers page.
func (b *browser) signIn(key string) {
	b.e.t.Helper()
	res, body := b.post("/signin", url.Values{"key": {key}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/computers" {
		b.e.t.Fatalf("sign in: %d %s\n%s", res.StatusCode, res.Header.Get("Location"), body)
	}
	if res, body := b.get("/computers"); res.StatusCode != 200 {
		b.e.t.Fatalf("computers after sign in: %d\n%s", res.StatusCode, body)
	}
}

func (e *env) key(scope, workspace, agent string) string {
	e.t.Helper()
	k, err := e.sup.Service.CreateKey(context.Background(), supervisor.CreateKeyRequest{Name: "k", Scope: scope, Workspace: workspace, Agent: agent})
	if err != nil {
		e.t.Fatal(err)
	}
	return k.Secret
}

func (e *env) agentExists(id string) bool {
	_, err := e.sup.Service.AgentWorkspace(context.Background(), id)
	return err == nil
}

func wantStatus(t *testing.T, what string, res *http.Response, body string, status int, contains ...string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, res.StatusCode, status, body)
	}
	for _, c := range contains {
		if !strings.Contains(body, c) {
			t.Fatalf("%s: page lacks %q\n%s", what, c, body)
		}
	}
}

func TestSignIn(t *testing.T) {
	e := newEnv(t, false)
	e.sup.Agent(t, "a1", "red", nil)
	b := e.browser()

	res, body := b.get("/computers")
	wantStatus(t, "computers before sign in", res, body, 401, "Sign in to use the console")
	if csp := res.Header.Get("Content-Security-Policy"); csp != console.CSP {
		t.Fatalf("CSP = %q", csp)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "style=") {
		t.Fatal("the page has an inline script or style")
	}

	res, body = b.post("/signin", url.Values{"key": {"wrong"}})
	wantStatus(t, "wrong key", res, body, 401, "Wrong key")
	if len(res.Cookies()) != 0 {
		t.Fatalf("a wrong key got a cookie: %v", res.Cookies())
	}
	res, body = b.post("/signin", url.Values{"key": {e.key(store.ScopeAgent, "", "a1")}})
	wantStatus(t, "agent key", res, body, 403, "Agent keys cannot sign in")
	if len(res.Cookies()) != 0 {
		t.Fatalf("an agent key got a cookie: %v", res.Cookies())
	}

	res, body = b.post("/signin", url.Values{"key": {e.sup.Token}})
	wantStatus(t, "operator token", res, body, 303)
	ck := res.Cookies()
	if len(ck) != 1 || ck[0].Name != console.CookieName || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/" || ck[0].Secure || len(ck[0].Value) < 40 {
		t.Fatalf("session cookie = %+v", ck)
	}
	res, body = b.get("/computers")
	wantStatus(t, "computers", res, body, 200, "Signed in as operator", "a1")
	if strings.Contains(body, e.sup.Token) {
		t.Fatal("the page shows the token")
	}

	// Sign out ends the session on the server, not only in the browser.
	old := ck[0].Value
	res, body = b.post("/signout", nil)
	wantStatus(t, "sign out", res, body, 200, "You are signed out")
	req, _ := http.NewRequest("GET", e.srv.URL+"/computers", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: old})
	res, body = e.browser().do(req)
	wantStatus(t, "old cookie after sign out", res, body, 401)

	// A workspace key signs in.
	w := e.browser()
	w.signIn(e.key(store.ScopeWorkspace, "red", ""))
	res, body = w.get("/computers")
	wantStatus(t, "workspace computers", res, body, 200, "Signed in as workspace red")

	// The API is not the console's: /v1 answers as before.
	res, body = w.get("/v1/nothing")
	if res.StatusCode != 404 || !strings.Contains(body, `"code":"not_found"`) {
		t.Fatalf("/v1/nothing: %d %s", res.StatusCode, body)
	}
}

func TestSecureCookieOverTLS(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	res, body := b.post("/signin", url.Values{"key": {e.sup.Token}})
	wantStatus(t, "sign in", res, body, 303)
	if ck := res.Cookies(); len(ck) != 1 || !ck[0].Secure || !ck[0].HttpOnly {
		t.Fatalf("cookie over TLS = %+v", ck)
	}
}

func TestRevokedKeyEndsSession(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	k, err := e.sup.Service.CreateKey(ctx, supervisor.CreateKeyRequest{Name: "k", Scope: store.ScopeOperator})
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(k.Secret)
	if err := e.sup.Service.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	res, body := b.post("/agents", url.Values{"id": {"x1"}, "name": {"x"}})
	wantStatus(t, "revoked key", res, body, 401, "no longer accepted", "was revoked")
	if e.agentExists("x1") {
		t.Fatal("a revoked key's session created an agent")
	}
}

func TestExpiredSession(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.signIn(e.sup.Token)
	e.clk.Advance(console.DefaultIdleTimeout - time.Minute)
	res, body := b.get("/computers")
	wantStatus(t, "before idle timeout", res, body, 200)
	// The live table's polling does not keep the session alive.
	e.clk.Advance(console.DefaultIdleTimeout - time.Minute)
	res, body = b.get("/live/computers")
	wantStatus(t, "polling before idle timeout", res, body, 200)
	e.clk.Advance(2 * time.Minute)
	res, body = b.post("/agents", url.Values{"id": {"late"}, "name": {"late"}})
	wantStatus(t, "post with an expired session", res, body, 401, "expired", "Nothing was changed")
	if e.agentExists("late") {
		t.Fatal("an expired session created an agent")
	}
	res, body = b.get("/computers")
	wantStatus(t, "after expiry", res, body, 401)
}

func TestCSRF(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.signIn(e.sup.Token)
	res, body := b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}, "csrf": {""}})
	wantStatus(t, "no CSRF token", res, body, 403, "security token is missing or wrong", "Nothing was changed")
	res, body = b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}, "csrf": {strings.Repeat("A", len(b.csrf))}})
	wantStatus(t, "forged CSRF token", res, body, 403, "Nothing was changed")
	// Another session's token does not count either.
	other := e.browser()
	other.signIn(e.sup.Token)
	res, body = b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}, "csrf": {other.csrf}})
	wantStatus(t, "another session's CSRF token", res, body, 403)
	if e.agentExists("c1") {
		t.Fatal("a post without the right CSRF token created an agent")
	}

	res, body = b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}}, "Sec-Fetch-Site", "cross-site")
	wantStatus(t, "cross-site post", res, body, 403, "from another site")
	res, body = b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}}, "Origin", "https://evil.example")
	wantStatus(t, "post from another origin", res, body, 403, "from another site")
	res, body = b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}}, "Sec-Fetch-Site", "same-site")
	wantStatus(t, "post from a sibling site", res, body, 403)
	if e.agentExists("c1") {
		t.Fatal("a cross-site post created an agent")
	}
	res, body = b.post("/signin", url.Values{"key": {e.sup.Token}}, "Sec-Fetch-Site", "cross-site")
	wantStatus(t, "cross-site sign in", res, body, 403)

	res, body = b.post("/agents", url.Values{"id": {"c1"}, "name": {"c"}}, "Origin", e.srv.URL, "Sec-Fetch-Site", "same-origin")
	wantStatus(t, "same-origin post", res, body, 303)
	if !e.agentExists("c1") {
		t.Fatal("the agent was not created")
	}
	res, body = b.get("/computers")
	wantStatus(t, "after create", res, body, 200, "Agent c1 created in workspace default")
}

func TestWorkspaceKeySeesItsWorkspaceOnly(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	lease := 120
	e.sup.Agent(t, "red1", "red", &supervisor.ConnectRequest{LeaseSeconds: &lease})
	e.sup.Agent(t, "blue1", "blue", &supervisor.ConnectRequest{LeaseSeconds: &lease})
	e.sup.Agent(t, "blue2", "blue", nil)
	b := e.browser()
	b.signIn(e.key(store.ScopeWorkspace, "red", ""))

	res, body := b.get("/computers")
	wantStatus(t, "computers", res, body, 200, "red1")
	if strings.Contains(body, "blue1") || strings.Contains(body, "blue2") {
		t.Fatalf("a red key sees blue agents:\n%s", body)
	}
	res, body = b.get("/live/computers")
	wantStatus(t, "live computers", res, body, 200, "red1")
	if strings.Contains(body, "blue") {
		t.Fatal("the live table shows blue agents")
	}
	res, body = b.get("/agents/blue1")
	wantStatus(t, "another workspace's agent page", res, body, 404, `agent &#34;blue1&#34; does not exist`)
	if _, err := e.sup.Service.Start(ctx, "blue1"); err != nil {
		t.Fatal(err)
	}
	blue, _ := e.sup.Service.Status(ctx, "blue1")
	res, body = b.get("/sessions/" + blue.Session.ID)
	wantStatus(t, "another workspace's session page", res, body, 404, "does not exist")
	if _, err := e.sup.Service.Stop(ctx, "blue1"); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{"/agents/blue1/start", "/agents/blue1/disconnect", "/agents/blue1/open", "/attention/blue1/confirm"} {
		res, body = b.post(path, url.Values{"removed": {"yes"}})
		wantStatus(t, path, res, body, 404, "does not exist", "Nothing was changed")
	}
	res, body = b.post("/agents/blue1/limits", url.Values{"leaseSeconds": {"300"}, "dailySeconds": {"900"}})
	wantStatus(t, "limits of blue1", res, body, 404)
	res, body = b.post("/computers", url.Values{"agent": {"blue2"}, "provider": {fake.ID}})
	wantStatus(t, "connect blue2", res, body, 404, "does not exist")
	res, body = b.post("/agents", url.Values{"id": {"sneak"}, "name": {"s"}, "workspace": {"blue"}})
	wantStatus(t, "create in blue", res, body, 403, "not allowed")
	res, body = b.post("/lenders/x/revoke", nil)
	wantStatus(t, "revoke a lender", res, body, 403)

	st, err := e.sup.Service.Status(ctx, "blue1")
	if err != nil || st.Session != nil || st.Connection.LeaseSeconds != lease {
		t.Fatalf("blue1 changed: %+v %v", st, err)
	}
	if _, err := e.sup.Service.Status(ctx, "blue2"); err == nil {
		t.Fatal("blue2 was connected")
	}
	if e.agentExists("sneak") {
		t.Fatal("sneak was created")
	}

	// Its own agent works.
	res, body = b.post("/agents/red1/start", nil)
	wantStatus(t, "start red1", res, body, 303)
	if st, _ := e.sup.Service.Status(ctx, "red1"); st.Session == nil || st.Session.State != store.StateRunning {
		t.Fatalf("red1 did not start: %+v", st.Session)
	}
	res, body = b.get("/usage")
	wantStatus(t, "usage", res, body, 200, "red")
	if strings.Contains(body, "blue") || strings.Contains(body, "by provider") {
		t.Fatalf("a red key's usage shows more than red:\n%s", body)
	}
}

func TestLimitErrorsShownAndNothingChanged(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	e.sup.Agent(t, "a1", "", nil)
	b := e.browser()
	b.signIn(e.sup.Token)

	res, body := b.post("/computers", url.Values{"agent": {"a1"}, "provider": {fake.ID}, "leaseSeconds": {"30"}, "dailySeconds": {"3600"}})
	wantStatus(t, "lease 30", res, body, 422, "leaseSeconds: 30 is outside 60..900", "Nothing was changed")
	res, body = b.post("/computers", url.Values{"agent": {"a1"}, "provider": {fake.ID}, "leaseSeconds": {"901"}})
	wantStatus(t, "lease 901", res, body, 422, "leaseSeconds: 901 is outside 60..900")
	res, body = b.post("/computers", url.Values{"agent": {"a1"}, "provider": {fake.ID}, "leaseSeconds": {"600"}, "dailySeconds": {"300"}})
	wantStatus(t, "budget below lease", res, body, 422, "dailySeconds: 300 is outside leaseSeconds (600)..")
	if !strings.Contains(body, `value="600"`) {
		t.Fatal("the refused form's values are not shown again")
	}
	res, body = b.post("/computers", url.Values{"agent": {"a1"}, "provider": {fake.ID}, "leaseSeconds": {"ten"}})
	wantStatus(t, "lease not a number", res, body, 400, `leaseSeconds: &#34;ten&#34; is not a whole number`)
	if _, err := e.sup.Service.Status(ctx, "a1"); err == nil {
		t.Fatal("a refused connect made a connection")
	}

	res, body = b.post("/computers", url.Values{"agent": {"a1"}, "provider": {fake.ID}, "leaseSeconds": {"300"}, "dailySeconds": {"1200"}})
	wantStatus(t, "connect", res, body, 303)
	res, body = b.post("/agents/a1/limits", url.Values{"leaseSeconds": {"600"}, "dailySeconds": {"599"}})
	wantStatus(t, "limits below lease", res, body, 422, "dailySeconds: 599 is outside leaseSeconds (600)..", "Nothing was changed")
	res, body = b.post("/agents/a1/limits", url.Values{"leaseSeconds": {"59"}, "dailySeconds": {"600"}})
	wantStatus(t, "lease 59", res, body, 422, "leaseSeconds: 59 is outside 60..900")
	if st, _ := e.sup.Service.Status(ctx, "a1"); st.Connection.LeaseSeconds != 300 || st.Connection.DailySeconds != 1200 {
		t.Fatalf("refused limits changed the connection: %+v", st.Connection)
	}
	res, body = b.post("/agents/a1/limits", url.Values{"leaseSeconds": {"600"}, "dailySeconds": {"7200"}})
	wantStatus(t, "limits", res, body, 303)
	if st, _ := e.sup.Service.Status(ctx, "a1"); st.Connection.LeaseSeconds != 600 || st.Connection.DailySeconds != 7200 {
		t.Fatalf("limits not saved: %+v", st.Connection)
	}
}

func TestComputersFlowAndLiveTable(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	b := e.browser()
	b.signIn(e.sup.Token)

	res, body := b.post("/agents", url.Values{"id": {"ag1"}, "name": {"Agent one"}, "workspace": {"ops"}})
	wantStatus(t, "create", res, body, 303)
	res, body = b.post("/computers", url.Values{"agent": {"ag1"}, "provider": {fake.ID}, "leaseSeconds": {"300"}, "dailySeconds": {"3600"}, "image": {"headless"}})
	wantStatus(t, "connect", res, body, 303)
	res, body = b.get("/live/computers")
	wantStatus(t, "live", res, body, 200, "ag1", "No session")
	tag := res.Header.Get("ETag")
	if tag == "" {
		t.Fatal("no ETag")
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/live/computers", nil)
	req.Header.Set("If-None-Match", tag)
	if res, _ := b.do(req); res.StatusCode != http.StatusNotModified {
		t.Fatalf("unchanged table: %d, want 304", res.StatusCode)
	}

	res, body = b.post("/agents/ag1/start", url.Values{"back": {"computers"}})
	wantStatus(t, "start", res, body, 303)
	res, body = b.get("/computers")
	// A running computer's line offers its terminal (a headless one no
	// live view).
	wantStatus(t, "running", res, body, 200, "Running", "ag1", `aria-label="Open a terminal on ag1 in a new tab"`)
	if strings.Contains(body, "Open live view of ag1") {
		t.Fatal("a headless computer's line offers live view")
	}
	req, _ = http.NewRequest("GET", e.srv.URL+"/live/computers", nil)
	req.Header.Set("If-None-Match", tag)
	res, body = b.do(req)
	wantStatus(t, "changed table", res, body, 200, "Running")

	res, body = b.get("/agents/ag1")
	wantStatus(t, "agent page", res, body, 200, "Running", "Stop the session")

	// A terminal link for the running computer; live view is off here.
	res, body = b.post("/agents/ag1/open", url.Values{"kind": {"terminal"}})
	wantStatus(t, "open terminal", res, body, 303)
	if loc := res.Header.Get("Location"); !strings.HasPrefix(loc, e.srv.URL+"/terminal/s/") {
		t.Fatalf("terminal link = %q", loc)
	}
	res, body = b.post("/agents/ag1/open", url.Values{"kind": {"view"}})
	wantStatus(t, "open live view", res, body, 503, "live view is off on this supervisor")

	// A recorded exec shows on the session's page with its exit code.
	st, _ := e.sup.Service.Status(ctx, "ag1")
	req, _ = http.NewRequest("POST", e.srv.URL+"/v1/agents/ag1/computer/exec", strings.NewReader(`{"command":"exit 3"}`))
	req.Header.Set("Authorization", "Bearer "+e.sup.Token)
	req.Header.Set("Idempotency-Key", "console-k1")
	if res, body := b.do(req); res.StatusCode != 200 || !strings.Contains(body, `"exitCode":3`) {
		t.Fatalf("exec: %d %s", res.StatusCode, body)
	}
	res, body = b.get("/sessions/" + st.Session.ID)
	wantStatus(t, "session page", res, body, 200, "<th scope=\"row\">exec</th>", "<td>3</td>", "Answered (200)")
	res, body = b.get("/sessions/nope")
	wantStatus(t, "unknown session", res, body, 404, "session &#34;nope&#34; does not exist")
	res, body = b.post("/agents/ag1/stop", nil)
	wantStatus(t, "stop", res, body, 303)
	if st, _ := e.sup.Service.Status(ctx, "ag1"); st.Session != nil {
		t.Fatalf("still a session: %+v", st.Session)
	}
	res, body = b.post("/agents/ag1/disconnect", nil)
	wantStatus(t, "disconnect", res, body, 303)
	if _, err := e.sup.Service.Status(ctx, "ag1"); err == nil {
		t.Fatal("still connected")
	}
	res, body = b.get("/usage")
	wantStatus(t, "usage", res, body, 200, "Seconds by provider", "Seconds by workspace", "ops")
	res, body = b.get("/usage.csv")
	wantStatus(t, "csv", res, body, 200, "by,key,day,seconds", "workspace,ops,")
	res, body = b.get("/providers")
	wantStatus(t, "providers", res, body, 200, fake.ID)
}

func TestConfirmCleanup(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	e.sup.Agent(t, "u1", "", &supervisor.ConnectRequest{})
	e.sup.Fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: fmt.Errorf("reset by peer")})
	if _, err := e.sup.Service.Start(ctx, "u1"); err == nil {
		t.Fatal("start with a lost reply succeeded")
	}
	b := e.browser()
	b.signIn(e.sup.Token)
	res, body := b.get("/attention")
	wantStatus(t, "attention", res, body, 200, "u1", "Uncertain", "machine id lost", "dev.berth.attempt")
	if !strings.Contains(body, "Needs attention (1)") {
		t.Fatal("the menu does not count the session needing attention")
	}
	res, body = b.get("/live/attention")
	wantStatus(t, "live attention", res, body, 200, "u1")
	req, _ := http.NewRequest("GET", e.srv.URL+"/live/attention", nil)
	req.Header.Set("If-None-Match", res.Header.Get("ETag"))
	if res, _ := b.do(req); res.StatusCode != http.StatusNotModified {
		t.Fatalf("unchanged attention table: %d, want 304", res.StatusCode)
	}
	red := e.browser()
	red.signIn(e.key(store.ScopeWorkspace, "red", ""))
	if res, body := red.get("/live/attention"); res.StatusCode != 200 || strings.Contains(body, "u1") {
		t.Fatalf("a red key sees another workspace's session: %d\n%s", res.StatusCode, body)
	}
	res, body = b.get("/attention/u1/confirm")
	wantStatus(t, "confirm step", res, body, 200, "I checked the provider", "Confirm provider cleanup")
	res, body = b.post("/attention/u1/confirm", nil)
	wantStatus(t, "confirm without the box", res, body, 400, "Nothing was changed")
	if st, _ := e.sup.Service.Status(ctx, "u1"); st.Session == nil || st.Session.State != store.StateUncertain {
		t.Fatalf("not uncertain any more: %+v", st.Session)
	}
	res, body = b.post("/attention/u1/confirm", url.Values{"removed": {"yes"}})
	wantStatus(t, "confirm", res, body, 303)
	if st, _ := e.sup.Service.Status(ctx, "u1"); st.Session != nil {
		t.Fatalf("still a live session: %+v", st.Session)
	}
	log, err := e.sup.Service.Audit(ctx, time.Time{}, 10)
	if err != nil || len(log) == 0 || log[0].Action != "computer.confirm_cleanup" || log[0].Target != "u1" || log[0].Actor != supervisor.ActorOperator {
		t.Fatalf("audit log = %+v, %v", log, err)
	}
	res, body = b.get("/attention")
	wantStatus(t, "attention after", res, body, 200, "Nothing needs attention")
}

func TestPairCode(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.signIn(e.sup.Token)
	res, body := b.post("/lenders/pair-codes", url.Values{"name": {"laptop"}})
	wantStatus(t, "pair code", res, body, 201, "Pairing code", "works once")
	m := regexp.MustCompile(`id="pair-code">([^<]+)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no code on the page")
	}
	p, err := e.sup.Service.Pair(context.Background(), supervisor.PairRequest{Code: m[1]})
	if err != nil || p.LenderID == "" {
		t.Fatalf("the shown code does not pair: %+v %v", p, err)
	}
	res, body = b.get("/lenders")
	wantStatus(t, "lenders", res, body, 200, "laptop", p.LenderID)
	if strings.Contains(body, m[1]) {
		t.Fatal("the code is shown again")
	}
	res, body = b.post("/lenders/"+p.LenderID+"/revoke", nil)
	wantStatus(t, "revoke", res, body, 303)
	res, body = b.get("/lenders")
	wantStatus(t, "lenders after revoke", res, body, 200, "revoked", "No lender is paired")
}

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestProviderAnswerAtFirstStart(t *testing.T) {
	e := newEnv(t, false)
	e.sup.Agent(t, "a1", "", &supervisor.ConnectRequest{})
	e.sup.Fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: fmt.Errorf("%w: the key was revoked", providers.ErrBadCredentials)})
	b := e.browser()
	b.signIn(e.sup.Token)
	res, body := b.post("/agents/a1/start", nil)
	if res.StatusCode < 400 || !strings.Contains(body, "credentials") || !strings.Contains(body, "Nothing was changed") {
		t.Fatalf("start with refused credentials: %d\n%s", res.StatusCode, body)
	}
	if st, _ := e.sup.Service.Status(context.Background(), "a1"); st.Session != nil {
		t.Fatalf("a refused start left a session: %+v", st.Session)
	}
}

func TestCredentialFieldsFromDescriber(t *testing.T) {
	sup := supervisortest.Start(t, supervisortest.Options{})
	con, err := console.New(console.Options{Service: sup.Service, Store: sup.Store, Token: sup.Token, DefaultProvider: fake.ID,
		Providers: map[string]providers.Provider{fake.ID: sup.Fake, "browserbase": (*browserbase.Browserbase)(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	sup.Agent(t, "a1", "", nil)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	b := (&env{t: t, sup: sup, srv: srv}).browser()
	b.signIn(sup.Token)
	_, body := b.get("/computers")
	for _, want := range []string{
		`name="cred.browserbase.apiKey" type="password"`, `name="cred.browserbase.projectId" type="text"`,
		`<legend>Credentials for browserbase</legend>`, `apiKey (required)`, `fake takes no credentials.`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the connect form lacks %s", want)
		}
	}
	// Only the chosen provider's fields are sent: the fake takes none, so
	// a stray browserbase key must not reach it.
	res, body := b.post("/computers", url.Values{"agent": {"a1"}, "provider": {fake.ID}, "cred.browserbase.apiKey": {"secret-key-123"}})
	wantStatus(t, "connect", res, body, 303)
	if strings.Contains(body, "secret-key-123") {
		t.Fatal("the page shows the credential")
	}
	res, body = b.post("/computers", url.Values{"agent": {"a1"}, "provider": {"nope"}, "cred.nope.apiKey": {"secret-key-123"}})
	if res.StatusCode/100 != 4 {
		t.Fatalf("a connection to an unknown provider: %d, want it refused", res.StatusCode)
	}
	if strings.Contains(body, "secret-key-123") {
		t.Fatalf("a refused form shows the credential again:\n%s", body)
	}
}

func TestCheckpoints(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	e.sup.Agent(t, "p1", "", nil)
	b := e.browser()
	b.signIn(e.sup.Token)
	res, body := b.post("/computers", url.Values{"agent": {"p1"}, "provider": {fake.ID}, "persistence": {"home"}, "maxCheckpoints": {"-1"}})
	wantStatus(t, "maxCheckpoints -1", res, body, 422, "maxCheckpoints: -1 is outside 0..")
	res, body = b.post("/computers", url.Values{"agent": {"p1"}, "provider": {fake.ID}, "persistence": {"home"}, "maxCheckpoints": {"2"}})
	wantStatus(t, "connect with a kept home", res, body, 303)
	if st, _ := e.sup.Service.Status(ctx, "p1"); st.Connection.Persistence != "home" || st.Connection.MaxCheckpoints != 2 {
		t.Fatalf("connection = %+v", st.Connection)
	}
	res, body = b.get("/agents/p1")
	wantStatus(t, "agent page", res, body, 200, "Checkpoints", "No checkpoints.", "A checkpoint is taken of a running computer")
	res, body = b.post("/agents/p1/start", nil)
	wantStatus(t, "start", res, body, 303)
	res, body = b.post("/agents/p1/checkpoints", url.Values{"name": {"cp1"}})
	wantStatus(t, "checkpoint", res, body, 303)
	res, body = b.get("/agents/p1")
	wantStatus(t, "agent page with a checkpoint", res, body, 200, "Checkpoint cp1 of p1 saved", "<th scope=\"row\">cp1</th>")
	res, body = b.post("/agents/p1/checkpoints", url.Values{"name": {"cp1"}})
	wantStatus(t, "second cp1", res, body, 409, "exists", "Nothing was changed")
	res, body = b.post("/agents/p1/checkpoints/cp1/delete", nil)
	wantStatus(t, "delete", res, body, 303)
	if cps, err := e.sup.Service.Checkpoints(ctx, "p1"); err != nil || len(cps) != 0 {
		t.Fatalf("checkpoints after delete: %+v %v", cps, err)
	}
}

// TestSigninRateLimit: sign-in attempts are limited per client address;
// past the limit even the right key is refused (429, Retry-After), with no
// session made.
func TestSigninRateLimit(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	for i := range console.SigninBurst {
		res, body := b.post("/signin", url.Values{"key": {"wrong"}})
		wantStatus(t, fmt.Sprintf("wrong key %d", i+1), res, body, 401, "Wrong key")
	}
	res, body := b.post("/signin", url.Values{"key": {e.sup.Token}})
	wantStatus(t, "the right key past the limit", res, body, 429, "Too many sign-in attempts from this address: at most 10 a minute")
	if res.Header.Get("Retry-After") == "" || len(res.Cookies()) != 0 {
		t.Fatalf("past the limit: Retry-After %q, cookies %v; want a wait and no session", res.Header.Get("Retry-After"), res.Cookies())
	}
}

// TestSessionsSharedThroughTheStore: a browser signed in at one supervisor
// is signed in at another on the same store (forms included), and after a
// restart; signing out at one ends it at both; a new SUPERVISOR_TOKEN ends
// the sessions of the old one.
func TestSessionsSharedThroughTheStore(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.signIn(e.sup.Token)
	another := func(token string) *browser {
		con, err := console.New(console.Options{Service: e.sup.Service, Store: e.sup.Store, Token: token, Clock: e.clk,
			Providers: map[string]providers.Provider{fake.ID: e.sup.Fake}, DefaultProvider: fake.ID})
		if err != nil {
			t.Fatal(err)
		}
		h := apiserver.New(e.sup.Service, token, nil)
		h.Console = con
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		// The same browser (its cookies are the host's, whatever the port).
		return &browser{e: &env{t: t, sup: e.sup, srv: srv, clk: e.clk}, c: b.c, csrf: b.csrf}
	}
	b2 := another(e.sup.Token)
	res, body := b2.get("/computers")
	wantStatus(t, "computers at the second supervisor", res, body, 200, "Sign out")
	res, body = b2.post("/agents", url.Values{"id": {"shared"}, "name": {"Shared"}})
	wantStatus(t, "a form at the second supervisor", res, body, 303)
	if !e.agentExists("shared") {
		t.Fatal("the second supervisor's form created no agent")
	}
	rotated := another(e.sup.Token + "-new")
	res, body = rotated.get("/computers")
	wantStatus(t, "after the operator token changed", res, body, 401, "no longer SUPERVISOR_TOKEN")
	b = e.browser()
	b.signIn(e.sup.Token)
	b2 = another(e.sup.Token)
	b2.c = b.c
	res, body = b2.post("/signout", nil)
	wantStatus(t, "sign out at the second supervisor", res, body, 200, "You are signed out")
	res, body = b.get("/computers")
	wantStatus(t, "the first supervisor after sign out at the second", res, body, 401)
}
