package ui

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/app/agentlink"
	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// now is the tests' fixed clock: 12:00 UTC on a Sunday.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// screen is a small PNG standing in for a desktop session's screen.
func screen(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 64, 40))
	for y := 0; y < 40; y++ {
		for x := 0; x < 64; x++ {
			img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 6), 0x80, 0xff})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func baseAgent(t *testing.T) *memAgent {
	days := make([]control.DayUsage, 14)
	for i := range days {
		d := now.AddDate(0, 0, i-13)
		days[i] = control.DayUsage{Day: d.Format("2006-01-02"), Seconds: int64((i * 977) % 5400), Sessions: int64(i % 3)}
	}
	days[13] = control.DayUsage{Day: now.Format("2006-01-02"), Seconds: 1200, Sessions: 2}
	return &memAgent{
		status: control.Status{
			Relay:      control.RelayStatus{URL: "wss://relay.example.com", Online: true},
			Supervisor: control.Pairing{Paired: true, URL: "https://berth.example.com", LenderID: "cp_lab"},
			Version:    "test",
		},
		settings: control.Settings{
			Lending: true, MaxComputers: 2, CPUs: 1, MemoryMB: 2048, DailySeconds: 14400,
			Desktop: true, ApprovalTimeoutSeconds: 60,
		},
		usage: control.Usage{
			TimeZone: "UTC", Today: days[13], DailySeconds: 14400, Days: days,
			ByAgent:     []control.UsageRow{{Key: "researcher", Seconds: 5400, Sessions: 4}, {Key: "tester", Seconds: 600, Sessions: 1}},
			ByWorkspace: []control.UsageRow{{Key: "default", Seconds: 6000, Sessions: 5}},
		},
		shots: map[string][]byte{},
	}
}

func withSessions(t *testing.T, m *memAgent) *memAgent {
	m.sessions = []control.Session{
		{
			ID: "c1", SessionID: "s1", Agent: "researcher", Workspace: "default", Provider: "local", Image: "desktop",
			Started: now.Add(-5 * time.Minute), Expires: now.Add(10 * time.Minute), TimeLeftSeconds: 600,
			CPUPercent: 12.5, MemoryBytes: 300 << 20, MemoryLimitBytes: 2 << 30,
		},
		{
			ID: "c2", SessionID: "s2", Agent: "tester", Workspace: "qa", Provider: "local", Image: "headless",
			Started: now.Add(-1 * time.Minute), Expires: now.Add(14 * time.Minute), TimeLeftSeconds: 840,
			StatsError: "docker stats: not yet sampled",
		},
	}
	m.shots["c1"] = screen(t)
	return m
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type harness struct {
	t     *testing.T
	app   fyne.App
	win   fyne.Window
	ui    *UI
	agent *memAgent
	clock *fakeClock
	quits int
}

func newHarness(t *testing.T, m *memAgent, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, app: test.NewTempApp(t), agent: m, clock: &fakeClock{t: now}}
	h.win = test.NewWindow(nil)
	t.Cleanup(h.win.Close)
	opts.Now = h.clock.Now
	opts.Location = time.UTC
	opts.Quit = func() { h.quits++ }
	if opts.Where == "" {
		opts.Where = "this app's own agent"
	}
	h.ui = New(h.app, h.win, m, opts)
	t.Cleanup(h.ui.Wait)
	h.win.Resize(fyne.NewSize(800, 900))
	h.refresh()
	return h
}

func (h *harness) refresh() {
	h.t.Helper()
	h.ui.Refresh(h.t.Context())
}

// settle waits for the actions the UI started.
func (h *harness) settle() { h.ui.Wait() }

func (h *harness) markup(name string) {
	h.t.Helper()
	test.AssertRendersToMarkup(h.t, name, h.win.Canvas())
}

func wantCalls(t *testing.T, m *memAgent, want ...string) {
	t.Helper()
	if got := m.Calls(); !slices.Equal(got, want) {
		t.Fatalf("agent calls = %q, want %q", got, want)
	}
}

func TestSessionsView(t *testing.T) {
	h := newHarness(t, withSessions(t, baseAgent(t)), Options{})
	h.markup("sessions.xml")
	c := h.ui.sessions.cards["c1"]
	if c.preview.Image.Bounds().Dx() != 64 || c.waiting.Visible() {
		t.Errorf("preview not shown: bounds %v, waiting shown %v", c.preview.Image.Bounds(), c.waiting.Visible())
	}
	if got := c.timing.Text; got != "Started 11:55:00 · 10m 00s left" {
		t.Errorf("timing = %q", got)
	}
	h.clock.Advance(30 * time.Second)
	h.refresh()
	if got := c.timing.Text; got != "Started 11:55:00 · 9m 30s left" {
		t.Errorf("after 30 s, timing = %q", got)
	}
}

func TestEmptyView(t *testing.T) {
	h := newHarness(t, baseAgent(t), Options{})
	h.markup("empty.xml")
}

func TestUsageView(t *testing.T) {
	h := newHarness(t, baseAgent(t), Options{})
	h.ui.Tabs().SelectIndex(TabUsage)
	h.markup("usage.xml")
	if h.ui.usage.bar.Value != 1200 || h.ui.usage.bar.Max != 14400 {
		t.Errorf("progress = %v of %v, want 1200 of 14400", h.ui.usage.bar.Value, h.ui.usage.bar.Max)
	}
	if n := len(h.ui.usage.chart.days); n != 14 {
		t.Errorf("chart has %d days, want 14", n)
	}
}

func TestSettingsView(t *testing.T) {
	h := newHarness(t, baseAgent(t), Options{Pair: noPair, Autostart: &fakeAutostart{}})
	h.ui.Tabs().SelectIndex(TabSettings)
	h.markup("settings.xml")
}

func TestApprovalPrompt(t *testing.T) {
	for _, approve := range []bool{true, false} {
		name := map[bool]string{true: "approve", false: "deny"}[approve]
		t.Run(name, func(t *testing.T) {
			m := baseAgent(t)
			m.settings.Approval = true
			m.approvals = []control.Approval{{
				ID: "ap1", Agent: "researcher", Workspace: "default", Image: "desktop",
				Requested: now.Add(-5 * time.Second), Deadline: now.Add(55 * time.Second), State: control.ApprovalPending,
			}}
			h := newHarness(t, m, Options{})
			c := h.ui.prompter.approvals["ap1"]
			if c == nil {
				t.Fatal("no approval prompt")
			}
			if approve {
				h.markup("prompt_approval.xml")
			}
			if got := c.countdown.Text; got != "Denied automatically in 55s unless you approve." {
				t.Errorf("countdown = %q", got)
			}
			h.clock.Advance(20 * time.Second)
			h.refresh()
			if got := c.countdown.Text; got != "Denied automatically in 35s unless you approve." {
				t.Errorf("countdown after 20 s = %q", got)
			}
			if approve {
				test.Tap(c.approve)
			} else {
				test.Tap(c.deny)
			}
			h.settle()
			wantCalls(t, m, map[bool]string{true: "approved ap1", false: "denied ap1"}[approve])
			if _, ok := h.ui.prompter.approvals["ap1"]; ok {
				t.Error("the prompt stayed after the decision")
			}
		})
	}
}

func TestStopSession(t *testing.T) {
	m := withSessions(t, baseAgent(t))
	h := newHarness(t, m, Options{})
	test.Tap(h.ui.sessions.cards["c2"].stop)
	h.settle()
	wantCalls(t, m, "stop c2")
	if _, ok := h.ui.sessions.cards["c2"]; ok {
		t.Error("the stopped session is still listed")
	}
	if len(h.ui.sessions.list.Objects) != 1 {
		t.Errorf("%d cards listed, want 1", len(h.ui.sessions.list.Objects))
	}
}

func TestStopFailureShown(t *testing.T) {
	m := withSessions(t, baseAgent(t))
	h := newHarness(t, m, Options{})
	m.mu.Lock()
	m.fail = &control.APIError{Status: 503, Code: control.CodeUnavailable, Message: "docker: engine not reachable"}
	m.mu.Unlock()
	c := h.ui.sessions.cards["c1"]
	test.Tap(c.stop)
	h.settle()
	if got := c.status.Text; got != "Could not stop the session of researcher: docker: engine not reachable" || !c.status.Visible() {
		t.Errorf("status = %q (shown %v)", got, c.status.Visible())
	}
}

func TestChangeLimit(t *testing.T) {
	m := baseAgent(t)
	h := newHarness(t, m, Options{})
	v := h.ui.settings
	v.maxComputers.SetText("")
	test.Type(v.maxComputers, "3")
	v.dailyMinutes.SetText("90")
	v.days.SetText("Mon, tue,wed")
	test.Tap(v.desktop)
	test.Tap(v.save)
	h.settle()
	m.mu.Lock()
	got := m.settings
	m.mu.Unlock()
	want := control.Settings{Lending: true, MaxComputers: 3, CPUs: 1, MemoryMB: 2048, DailySeconds: 5400, Desktop: false, ApprovalTimeoutSeconds: 60}
	if got.MaxComputers != want.MaxComputers || got.DailySeconds != want.DailySeconds || got.Desktop != want.Desktop || got.CPUs != want.CPUs || !got.Lending ||
		!slices.Equal(got.Hours.Days, []string{"mon", "tue", "wed"}) {
		t.Fatalf("agent settings = %+v, want %+v", got, want)
	}
	if v.saved.Text != "Saved." {
		t.Errorf("result = %q", v.saved.Text)
	}
}

func TestBadLimits(t *testing.T) {
	m := baseAgent(t)
	h := newHarness(t, m, Options{})
	v := h.ui.settings

	v.cpus.SetText("lots")
	test.Tap(v.save)
	h.settle()
	if want := `Not saved: CPUs per computer: "lots" is not a number`; v.saved.Text != want {
		t.Errorf("result = %q, want %q", v.saved.Text, want)
	}
	wantCalls(t, m) // nothing reached the agent

	v.cpus.SetText("1")
	v.maxComputers.SetText("99")
	test.Tap(v.save)
	h.settle()
	if want := "Not saved: maxComputers: 99 is outside 1..64"; v.saved.Text != want {
		t.Errorf("result = %q, want %q", v.saved.Text, want)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settings.MaxComputers != 2 {
		t.Errorf("a refused change was kept: %+v", m.settings)
	}
}

func TestLendingSwitch(t *testing.T) {
	m := baseAgent(t)
	h := newHarness(t, m, Options{})
	test.Tap(h.ui.lend)
	h.settle()
	wantCalls(t, m, "lending false")
	if h.ui.lend.Checked || h.ui.stateText.Text != "Lending is paused" {
		t.Errorf("after pausing: switch %v, state %q", h.ui.lend.Checked, h.ui.stateText.Text)
	}
	h.win.Canvas().(shortcutter).TypedShortcut(&desktop.CustomShortcut{KeyName: fyne.KeyL, Modifier: fyne.KeyModifierShortcutDefault})
	h.settle()
	wantCalls(t, m, "lending false", "lending true")
}

func TestShortcuts(t *testing.T) {
	h := newHarness(t, baseAgent(t), Options{})
	for i, k := range []fyne.KeyName{fyne.Key3, fyne.Key2, fyne.Key1} {
		h.win.Canvas().(shortcutter).TypedShortcut(&desktop.CustomShortcut{KeyName: k, Modifier: fyne.KeyModifierShortcutDefault})
		if got, want := h.ui.Tabs().SelectedIndex(), 2-i; got != want {
			t.Errorf("after Ctrl+%s, tab %d, want %d", k, got, want)
		}
	}
	h.win.Canvas().(shortcutter).TypedShortcut(&desktop.CustomShortcut{KeyName: fyne.KeyQ, Modifier: fyne.KeyModifierShortcutDefault})
	if h.quits != 1 {
		t.Errorf("Ctrl+Q quit %d times", h.quits)
	}
}

type shortcutter interface{ TypedShortcut(fyne.Shortcut) }

func TestTabOrder(t *testing.T) {
	h := newHarness(t, baseAgent(t), Options{Autostart: &fakeAutostart{}, Pair: noPair})
	h.ui.Tabs().SelectIndex(TabSettings)
	c := h.win.Canvas()
	var seen []string
	for range 40 {
		test.FocusNext(c)
		seen = append(seen, focusName(c.Focused()))
	}
	want := []string{"entry:1 to 64", "entry:for example 1 or 0.5", "entry:256 to 65536", "entry:1 to 1440",
		"entry:HH:MM, empty for any time", "entry:HH:MM, empty for any time",
		"entry:mon, tue, ... empty for every day", "entry:for example Europe/Berlin, empty for this machine's",
		"check:Allow desktop computers (with a screen)", "check:Ask me before each session starts",
		"entry:10 to 3600", "button:Save limits", "entry:https://berth.example.com", "entry:ABCD-EFGH-JK"}
	if len(seen) < len(want) || !slices.Equal(seen[:len(want)], want) {
		t.Errorf("Tab order = %q, want it to start %q", seen, want)
	}
	if !slices.Contains(seen, "button:Pair this machine") || !slices.Contains(seen, "check:Lend this machine") || !slices.Contains(seen, "check:Start Berth when I log in") {
		t.Errorf("Tab never reached the lending switch or start at login: %q", seen)
	}
}

func TestPromptsBudgetAndNotice(t *testing.T) {
	m := baseAgent(t)
	m.usage.Today.Seconds = 13500
	m.status.Relay = control.RelayStatus{URL: "wss://relay.example.com", Online: false, LastError: "dial tcp: connection refused"}
	m.cleanups = []control.CleanupPrompt{
		{ID: "l1", Kind: control.KindContainer, Name: "berth-c-old1", Agent: "researcher", Reason: "no session owns it after a restart", State: control.CleanupOpen},
		{ID: "l2", Kind: control.KindVolume, Name: "berth-c-old1-home", Reason: "cleanup failed: volume in use", State: control.CleanupOpen},
		{ID: "l3", Kind: control.KindNetwork, Name: "berth-n-old1", State: control.CleanupOpen},
	}
	h := newHarness(t, m, Options{})
	h.markup("prompts.xml")
	if got := h.ui.stateText.Text; got != "Offline from the relay" {
		t.Errorf("state = %q", got)
	}
	if !strings.Contains(h.ui.prompter.budget.Text, "nearly spent: 3h 45m of 4h 00m") {
		t.Errorf("budget warning = %q", h.ui.prompter.budget.Text)
	}
	test.AssertNotificationSent(t, &fyne.Notification{Title: "Berth: lending budget nearly spent",
		Content: "3h 45m of today's 4h 00m are used."}, func() {
		h.ui.notified = map[string]bool{}
		h.refresh()
	})
	test.Tap(h.ui.prompter.leftovers["l1"].remove)
	h.settle()
	test.Tap(h.ui.prompter.leftovers["l3"].keep)
	h.settle()
	wantCalls(t, m, "removed l1", "kept l3")
	if len(h.ui.prompter.leftovers) != 1 {
		t.Errorf("%d leftovers still asked about, want 1", len(h.ui.prompter.leftovers))
	}
}

func TestAgentUnreachable(t *testing.T) {
	h := newHarness(t, &memAgent{}, Options{})
	h.ui.agent = downAgent{h.agent}
	h.refresh()
	if got := h.ui.stateText.Text; got != "Cannot reach the agent" {
		t.Errorf("state = %q", got)
	}
	if got := h.ui.prompter.notices["agent"]; !strings.Contains(got, "connect: no such file or directory") {
		t.Errorf("notice = %q", got)
	}

	// With the app's own agent waiting for a pairing, the notice says so.
	h.ui.opts.AgentProblem = func() string {
		return "this machine is not paired yet: pair it with a supervisor in Settings"
	}
	h.refresh()
	if got, want := h.ui.prompter.notices["agent"], "The agent is not running: this machine is not paired yet: pair it with a supervisor in Settings"; got != want {
		t.Errorf("notice = %q, want %q", got, want)
	}
	h.markup("agent_down.xml")
}

type downAgent struct{ *memAgent }

func (downAgent) Status(context.Context) (control.Status, error) {
	return control.Status{}, &url.Error{Op: "Get", URL: "http://berth-agent/v1/status", Err: errString("dial unix /run/berth/agent.sock: connect: no such file or directory")}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestOpenLiveView(t *testing.T) {
	h := newHarness(t, withSessions(t, baseAgent(t)), Options{})
	c := h.ui.sessions.cards["c1"]
	test.Tap(c.live)
	if c.status.Visible() {
		t.Fatalf("open failed: %s", c.status.Text)
	}
	u, err := liveViewURL("https://berth.example.com/", c.session)
	if err != nil || u.String() != "https://berth.example.com/view/s1" {
		t.Errorf("live view URL = %v, %v", u, err)
	}
	// The agent's owner link, when the session has one, is what opens.
	owner := "https://berth.example.com/view/s1/owner?key=k1"
	if u, err := liveViewURL("https://berth.example.com/", control.Session{ID: "c1", SessionID: "s1", ViewURL: owner}); err != nil || u.String() != owner {
		t.Errorf("live view URL with an owner link = %v, %v", u, err)
	}
	if h.ui.sessions.cards["c2"].live != nil {
		t.Error("a headless session has a live view button")
	}
}

func TestTrayMenu(t *testing.T) {
	m := withSessions(t, baseAgent(t))
	h := newHarness(t, m, Options{})
	tray := &fakeTray{}
	h.ui.EnableTray(tray)
	menu := tray.menu
	if menu == nil || tray.icon == nil {
		t.Fatal("tray not set")
	}
	var labels []string
	for _, it := range menu.Items {
		if !it.IsSeparator {
			labels = append(labels, it.Label)
		}
	}
	want := []string{TrayLend, "researcher (desktop): 10 min left", "tester (headless): 14 min left", TrayOpen, TrayQuit}
	if !slices.Equal(labels, want) {
		t.Errorf("tray items = %q, want %q", labels, want)
	}
	if !menu.Items[0].Checked {
		t.Error("lending item not checked while lending")
	}
	if tray.icon != StateIcon(agentlink.StateBusy) {
		t.Error("tray icon is not the busy one")
	}
	menu.Items[0].Action()
	h.settle()
	wantCalls(t, m, "lending false")
	if tray.menu.Items[0].Checked || tray.icon != StateIcon(agentlink.StatePaused) {
		t.Error("tray did not follow the pause")
	}
	tray.menu.Items[len(tray.menu.Items)-1].Action()
	if h.quits != 1 {
		t.Errorf("tray Quit quit %d times", h.quits)
	}
}

type fakeTray struct {
	menu *fyne.Menu
	icon fyne.Resource
}

func (f *fakeTray) SetSystemTrayMenu(m *fyne.Menu)    { f.menu = m }
func (f *fakeTray) SetSystemTrayIcon(r fyne.Resource) { f.icon = r }
func (f *fakeTray) SetSystemTrayWindow(fyne.Window)   {}

func TestStateIcons(t *testing.T) {
	seen := map[string]bool{}
	for _, st := range []agentlink.State{agentlink.StateLending, agentlink.StatePaused, agentlink.StateBusy, agentlink.StateOffline} {
		r := StateIcon(st)
		img, err := png.Decode(bytes.NewReader(r.Content()))
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		if b := img.Bounds(); b.Dx() != 32 || b.Dy() != 32 {
			t.Errorf("%s: %v, want 32x32", st, b)
		}
		if len(r.Content()) > 2048 {
			t.Errorf("%s: %d bytes, want a tiny icon", st, len(r.Content()))
		}
		if seen[string(r.Content())] {
			t.Errorf("%s looks like another state's icon", st)
		}
		seen[string(r.Content())] = true
	}
}

// focusName names a focused control: its kind and label or placeholder.
func focusName(f fyne.Focusable) string {
	switch w := f.(type) {
	case *widget.Check:
		return "check:" + w.Text
	case *widget.Entry:
		return "entry:" + w.PlaceHolder
	case *widget.Button:
		return "button:" + w.Text
	case nil:
		return "none"
	}
	return fmt.Sprintf("%T", f)
}

func noPair(context.Context, string, string, string) (agentlink.Paired, error) {
	return agentlink.Paired{}, errString("no supervisor in this test")
}

type fakeAutostart struct{ on bool }

func (f *fakeAutostart) Enabled() bool            { return f.on }
func (f *fakeAutostart) SetEnabled(on bool) error { f.on = on; return nil }

func TestApprovalNotification(t *testing.T) {
	m := baseAgent(t)
	h := newHarness(t, m, Options{})
	m.mu.Lock()
	m.approvals = []control.Approval{{ID: "ap2", Agent: "tester", Workspace: "qa", Image: "headless",
		Deadline: now.Add(time.Minute), State: control.ApprovalPending}}
	m.mu.Unlock()
	test.AssertNotificationSent(t, &fyne.Notification{Title: "Berth: approve a session?",
		Content: "Agent tester of workspace qa asks for a headless computer on this machine."}, h.refresh)
	// Once per request.
	test.AssertNotificationSent(t, nil, h.refresh)
}
