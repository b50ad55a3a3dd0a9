package e2e

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/daemon"
	"github.com/berthdev/berth/supervisor/store"
)

// axeSource is axe-core 4.14.1 from npm (testdata/axe/VERSION).
//
//go:embed testdata/axe/axe.min.js
var axeSource string

// consolePage drives the console in headless Chromium.
type consolePage struct {
	t    *testing.T
	ctx  context.Context
	base string
	// csp collects what Chromium logged about Content-Security-Policy.
	csp chan string
}

func (p *consolePage) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	// chromedp looks nodes up in its own copy of the page, which a new
	// page, or rows the live table swapped, replace in events of their
	// own. Steps that met a node of the copy being replaced are run again:
	// setting a value twice is harmless, and a submit that failed sent
	// nothing.
	for try := 1; ; try++ {
		err := chromedp.Do(ctx, steps...)
		if err == nil {
			return
		}
		if try == 3 || !strings.Contains(err.Error(), "No node with given id found") {
			p.t.Fatalf("%s: %v", what, err)
		}
		p.t.Logf("%s: %v; again", what, err)
		time.Sleep(250 * time.Millisecond)
	}
}

// eval runs a script and decodes its value (awaiting a promise).
func eval[T any](p *consolePage, what, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
	return v
}

func (p *consolePage) text(sel string) string {
	p.t.Helper()
	return eval[string](p, "read "+sel, fmt.Sprintf(`document.querySelector(%q).innerText`, sel))
}

// waitText waits until the element sel holds want.
func (p *consolePage) waitText(sel, want string) {
	p.t.Helper()
	ok := testkit.Poll(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).innerText||""`, sel)))
		if err != nil || !strings.Contains(s, want) {
			return false
		}
		// The same through chromedp's own copy of the page's nodes: it
		// takes a new page's nodes in an event of its own, after the page
		// can already be read, and a form step on the old page's nodes
		// fails with "No node with given id found".
		s, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		return err == nil && strings.Contains(s, want)
	})
	if !ok {
		body, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		p.t.Fatalf("%s never showed %q; the page says:\n%s", sel, want, body)
	}
}

// scheme emulates prefers-color-scheme and a viewport width.
func (p *consolePage) scheme(dark bool, width int64) {
	p.t.Helper()
	v := "light"
	if dark {
		v = "dark"
	}
	if _, err := chromedp.Call(p.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}}); err != nil {
		p.t.Fatalf("emulate %s: %v", v, err)
	}
	if _, err := chromedp.Call(p.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: width, Height: 800, DeviceScaleFactor: 1, Mobile: width < 600}); err != nil {
		p.t.Fatalf("emulate %d px: %v", width, err)
	}
}

type axeResult struct {
	Passes     int            `json:"passes"`
	Violations []axeViolation `json:"violations"`
}

type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// check runs axe-core on the page in light and dark, fails on serious or
// critical violations, checks that nothing broke the CSP, and saves
// screenshots (light and dark at 1280x800; light at 375 px when phone).
func (p *consolePage) check(name string, phone bool) {
	p.t.Helper()
	for _, dark := range []bool{false, true} {
		p.scheme(dark, 1280)
		if !eval[bool](p, "axe loaded", `typeof axe !== "undefined"`) {
			eval[bool](p, "inject axe", axeSource+";true")
		}
		res := eval[axeResult](p, "axe on "+name, `axe.run(document, {resultTypes: ["violations"]}).then(r => ({
			passes: r.passes.length,
			violations: r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v =>
				({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(" "))}))}))`)
		if res.Passes < 10 {
			p.t.Fatalf("axe on %s checked only %d rules: it did not run", name, res.Passes)
		}
		for _, v := range res.Violations {
			p.t.Errorf("axe on %s (dark %v): %s %s: %s at %v", name, dark, v.Impact, v.ID, v.Help, v.Nodes)
		}
		suffix := "light"
		if dark {
			suffix = "dark"
		}
		p.shot(name + "-" + suffix)
	}
	if phone {
		p.scheme(false, 375)
		p.shot(name + "-phone")
	}
	p.scheme(false, 1280)
	inline := eval[int](p, "inline styles", `document.querySelectorAll("[style], script:not([src]), style").length`)
	if inline != 0 {
		p.t.Errorf("%s has %d inline styles or scripts", name, inline)
	}
	select {
	case msg := <-p.csp:
		p.t.Errorf("%s: Chromium reports a CSP violation: %s", name, msg)
	default:
	}
}

func (p *consolePage) shot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(p.t.ArtifactDir(), "console-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *consolePage) open(path string) {
	p.t.Helper()
	p.run("open "+path, chromedp.Navigate(p.base+path), chromedp.WaitReady(chromedp.CSS("main")))
}

// usageSeconds is the seconds of provider key in GET /v1/usage?by=provider.
func usageSeconds(s *super, key string) int64 {
	var u struct {
		Rows []struct {
			Key     string `json:"key"`
			Seconds int64  `json:"seconds"`
		} `json:"rows"`
	}
	s.must("GET", "/v1/usage?by=provider", nil, 200, &u)
	for _, r := range u.Rows {
		if r.Key == key {
			return r.Seconds
		}
	}
	return 0
}

// TestConsole signs in to the console in Chromium, creates an agent,
// connects it to Docker and starts and stops its computer through the
// forms, watches the table update by itself, reads usage, creates a
// pairing code and confirms the cleanup of an uncertain session, checking
// each step against the REST API; axe-core runs on every page, light and
// dark, and each page is saved as a screenshot.
func TestConsole(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	requireChromium(t)
	light(t)
	// Docker, and the fault-injecting fake for an uncertain session.
	s := startSupervisorEgress(t, "berth/test:latest", daemon.EgressOptions{Listen: ":0"}, "docker", fake.ID)
	p := &consolePage{t: t, ctx: browser(t, testkit.Context(t)), base: s.url, csp: make(chan string, 16)}
	if err := chromedp.Listen(p.ctx, func(ev any) {
		if e, ok := ev.(*log.EventEntryAdded); ok && strings.Contains(e.Entry.Text, "Content Security Policy") {
			select {
			case p.csp <- e.Entry.Text:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(p.ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}

	// Sign in: a wrong key first.
	p.open("/")
	p.waitText("h1", "Sign in")
	p.check("signin", true)
	// axe finds what it should: an input without a label is critical.
	got := eval[[]string](p, "axe control", `(() => {
		const i = document.createElement("input"); i.id = "unlabelled"; document.body.appendChild(i);
		return axe.run(document).then(r => { i.remove(); return r.violations.filter(v => v.impact === "critical").map(v => v.id); });
	})()`)
	if !slices.Contains(got, "label") {
		t.Fatalf("axe did not flag an input without a label: %v", got)
	}
	p.run("wrong key", chromedp.SendKeys(chromedp.CSS("#key"), "not-the-token"), chromedp.Submit(chromedp.CSS("#key")))
	p.waitText(".msg.error", "Wrong key")
	p.run("sign in", chromedp.SendKeys(chromedp.CSS("#key"), s.token), chromedp.Submit(chromedp.CSS("#key")))
	p.waitText("h1", "Computers")
	p.waitText(".who", "Signed in as operator")

	// Create an agent and connect it to Docker, through the forms.
	p.run("create agent", chromedp.SendKeys(chromedp.CSS("#a-id"), "console-ag"), chromedp.SendKeys(chromedp.CSS("#a-name"), "Console agent"),
		chromedp.SendKeys(chromedp.CSS("#a-ws"), "team"), chromedp.Submit(chromedp.CSS("#a-id")))
	p.waitText(".msg.ok", "Agent console-ag created in workspace team")
	p.check("computers-connect", false) // with the connect form
	// A lease outside 60..900 first: the Service's message, nothing made.
	p.run("connect with lease 30", chromedp.SetValue(chromedp.CSS("#c-agent"), "console-ag"), chromedp.SetValue(chromedp.CSS("#c-provider"), "docker"),
		chromedp.SetValue(chromedp.CSS("#c-lease"), "30"), chromedp.Submit(chromedp.CSS("#c-lease")))
	p.waitText(".msg.error", "leaseSeconds: 30 is outside 60..900")
	if st := s.call("GET", "/v1/agents/console-ag/computer", nil, nil); st != 404 {
		t.Fatalf("a refused connect made a connection: %d", st)
	}
	p.run("connect", chromedp.SetValue(chromedp.CSS("#c-agent"), "console-ag"), chromedp.SetValue(chromedp.CSS("#c-provider"), "docker"),
		chromedp.SetValue(chromedp.CSS("#c-lease"), "120"), chromedp.SetValue(chromedp.CSS("#c-daily"), "600"), chromedp.Submit(chromedp.CSS("#c-lease")))
	p.waitText(".msg.ok", "Agent console-ag connected to docker (lease 120 s, daily budget 600 s)")
	var status struct {
		Connection struct {
			Provider     string `json:"provider"`
			LeaseSeconds int    `json:"leaseSeconds"`
			DailySeconds int    `json:"dailySeconds"`
		} `json:"connection"`
		Session *struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"session"`
	}
	s.must("GET", "/v1/agents/console-ag/computer", nil, 200, &status)
	if status.Connection.Provider != "docker" || status.Connection.LeaseSeconds != 120 || status.Connection.DailySeconds != 600 {
		t.Fatalf("connection = %+v", status.Connection)
	}
	before := usageSeconds(s, "docker")

	// Start from the table, see it running, stop it.
	p.run("start", chromedp.Click(chromedp.CSS(`button[aria-label="Start console-ag"]`)))
	p.waitText("#computer-rows", "Running")
	s.must("GET", "/v1/agents/console-ag/computer", nil, 200, &status)
	if status.Session == nil || status.Session.State != "running" {
		t.Fatalf("after start from the console: %+v", status.Session)
	}
	p.check("computers", true)
	sessionID := status.Session.ID
	if st, err := callAPI(s.url, s.token, "POST", "/v1/agents/console-ag/computer/exec", "console-exec-1", map[string]any{"command": "echo hi; exit 7"}, nil); err != nil || st != 200 {
		t.Fatalf("exec: %d %v", st, err)
	}
	time.Sleep(2 * time.Second) // some seconds of usage
	p.run("stop", chromedp.Click(chromedp.CSS(`button[aria-label="Stop console-ag"]`)))
	p.waitText(".msg.ok", "Stopped")
	s.must("GET", "/v1/agents/console-ag/computer", nil, 200, &status)
	if status.Session != nil {
		t.Fatalf("after stop from the console: %+v", status.Session)
	}

	// The table follows changes made elsewhere without a reload.
	eval[bool](p, "mark page", `window.notReloaded = true`)
	s.must("POST", "/v1/agents/console-ag/computer/start", nil, 200, nil)
	p.waitText("#computer-rows", "Running")
	if !eval[bool](p, "no reload", `window.notReloaded === true`) {
		t.Fatal("the page reloaded instead of updating its table")
	}
	s.must("POST", "/v1/agents/console-ag/computer/stop", nil, 200, nil)
	p.waitText("#computer-rows", "No session")

	// Usage shows the new seconds, as the API does.
	after := usageSeconds(s, "docker")
	if after <= before {
		t.Fatalf("usage of docker did not grow: %d -> %d", before, after)
	}
	p.open("/usage")
	p.waitText("#u-provider", "Seconds by provider")
	p.waitText("main", fmt.Sprintf("%d s", after))
	p.waitText("main", "console-ag")
	if n := eval[int](p, "usage bars", `[...document.querySelectorAll("#u-provider ~ figure rect.bar title")].filter(t => t.textContent.includes("docker")).length`); n == 0 {
		t.Fatal("the usage chart has no bar for docker")
	}
	p.check("usage", true)

	// The session's tool calls.
	p.open("/sessions/" + sessionID)
	p.waitText("main", "exec")
	p.waitText("tbody", "7")
	p.check("session", false)

	// The agent's page.
	p.open("/agents/console-ag")
	p.waitText("main", "Change lease and budget")
	p.check("agent", false)

	// A pairing code, redeemed through the API.
	p.open("/lenders")
	p.run("pair code", chromedp.SendKeys(chromedp.CSS("#p-name"), "lent-laptop"), chromedp.Submit(chromedp.CSS("#p-name")))
	p.waitText("#code-h", "Pairing code")
	code := strings.TrimSpace(p.text("#pair-code"))
	var paired struct {
		ID string `json:"agentId"`
	}
	s.must("POST", "/v1/companions/pair", map[string]any{"code": code}, 201, &paired)
	p.open("/lenders")
	p.waitText("main", "lent-laptop")
	p.check("lenders", false)

	// An uncertain session: the fake provider loses the reply of a create
	// started from the agent's page, and finds no machine afterwards.
	s.must("POST", "/v1/agents", map[string]any{"id": "lost-ag", "name": "Lost", "workspace": "team"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "lost-ag", "provider": fake.ID}, 201, nil)
	s.d.Providers[fake.ID].(*fake.Provider).SetFaults(fake.Faults{FailCreates: 1, CreateErr: errors.New("connection reset by peer")})
	p.open("/agents/lost-ag")
	p.run("start lost-ag", chromedp.Click(chromedp.CSS(`form[action="/agents/lost-ag/start"] button`)))
	p.waitText(".msg.error", "Nothing was changed")
	s.must("GET", "/v1/agents/lost-ag/computer", nil, 200, &status)
	if status.Session == nil || status.Session.State != "uncertain" {
		t.Fatalf("lost-ag after a lost create: %+v", status.Session)
	}
	lostSession := status.Session.ID
	p.open("/attention")
	p.waitText("main", "lost-ag")
	p.waitText("main", "machine id lost")
	p.check("attention", true)
	p.run("to confirm", chromedp.Click(chromedp.CSS(`a[href="/attention/lost-ag/confirm"]`)))
	p.waitText("main", "I checked the provider")
	p.check("confirm", false)
	p.run("confirm", chromedp.Click(chromedp.CSS("#removed")), chromedp.Submit(chromedp.CSS("#removed")))
	p.waitText(".msg.ok", "Cleanup of session "+lostSession+" (agent lost-ag) confirmed")
	p.waitText("main", "Nothing needs attention")
	s.must("GET", "/v1/agents/lost-ag/computer", nil, 200, &status)
	if status.Session != nil {
		t.Fatalf("the uncertain session is still live: %+v", status.Session)
	}
	var audit struct {
		Entries []struct {
			Action, Target, Actor string
		} `json:"entries"`
	}
	s.must("GET", "/v1/audit", nil, 200, &audit)
	if len(audit.Entries) == 0 || audit.Entries[0].Action != "computer.confirm_cleanup" || audit.Entries[0].Target != "lost-ag" {
		t.Fatalf("audit log = %+v", audit.Entries)
	}

	p.open("/providers")
	p.waitText("main", "docker (default)")
	p.check("providers", false)

	// Sign out: the pages ask for a key again.
	p.open("/computers")
	p.run("sign out", chromedp.Click(chromedp.CSS(".signout button")))
	p.waitText(".msg.ok", "You are signed out")
	p.open("/computers")
	p.waitText(".msg.error", "Sign in to use the console")
}

// BenchmarkConsoleFirstPaint loads the Computers page of 1,000 agents, each
// with a running session, in headless Chromium: the first contentful paint
// after navigation, p50 (target: at most 500 ms).
//
//	go test ./e2e -run '^$' -bench ConsoleFirstPaint -benchtime 10x
func BenchmarkConsoleFirstPaint(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	requireChromium(b)
	s := startSupervisor(b, "berth/test:latest")
	ctx := testkit.Context(b)
	for i := range 1000 {
		id := fmt.Sprintf("fcp-%04d", i)
		if _, err := s.d.Service.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: id, Name: id, Workspace: fmt.Sprintf("ws-%d", i%10)}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.d.Service.Connect(ctx, supervisor.ConnectRequest{Agent: id, Provider: "docker"}); err != nil {
			b.Fatal(err)
		}
		x, err := s.d.Store.Reserve(ctx, store.Reservation{Session: store.Session{ID: "s-" + id, AgentID: id, ComputerID: "c-" + id,
			AttemptID: "a-" + id, Provider: "docker", Image: "headless"}, Now: time.Now(), MinSeconds: 60})
		if err != nil {
			b.Fatal(err)
		}
		y := x
		y.State, y.MachineID = store.StateRunning, "m-"+id
		if err := s.d.Store.UpdateSession(ctx, y, x.State); err != nil {
			b.Fatal(err)
		}
	}
	bctx := browser(b, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(s.url+"/signin"), chromedp.SendKeys(chromedp.CSS("#key"), s.token),
		chromedp.Submit(chromedp.CSS("#key")), chromedp.WaitReady(chromedp.CSS("#computer-rows"))); err != nil {
		b.Fatal(err)
	}
	var paints []float64
	for b.Loop() {
		if err := chromedp.Do(bctx, chromedp.Navigate(s.url+"/computers")); err != nil {
			b.Fatal(err)
		}
		fcp, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`new Promise(r => new PerformanceObserver(l => {
			const e = l.getEntriesByName("first-contentful-paint")[0]; if (e) r(e.startTime);
		}).observe({type: "paint", buffered: true}))`, chromedp.EvalAwaitPromise))
		if err != nil {
			b.Fatal(err)
		}
		paints = append(paints, fcp)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#computer-rows tr").length`))
	if err != nil || rows != 1000 {
		b.Fatalf("the page has %d rows, want 1000 (%v)", rows, err)
	}
	b.ReportMetric(percentile(paints, 0.5), "first-contentful-paint-ms")
}
