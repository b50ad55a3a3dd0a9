// Package ui is the companion app's window and tray menu: the lending
// switch, the running sessions with their live figures and screen preview,
// usage against the lending budget, the owner's settings, pairing, and the
// prompts that need the owner (approvals, cleanups after a crash, a budget
// nearly spent, trouble notices). It talks to the agent through
// agentlink.Agent and never imports fyne.io/fyne/v2/app, so it is tested
// headless with fyne.io/fyne/v2/test.
package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/app/agentlink"
)

// Autostart turns starting the app at login on and off.
type Autostart interface {
	Enabled() bool
	SetEnabled(on bool) error
}

// Service installs and removes the agent as a system service.
type Service interface {
	Installed(ctx context.Context) (bool, error)
	Install(ctx context.Context) error
	Remove(ctx context.Context) error
}

// PairFunc pairs this machine with a supervisor using a one-time code.
type PairFunc func(ctx context.Context, supervisorURL, code, name string) (agentlink.Paired, error)

// Options configure a UI. Zero values take the defaults noted.
type Options struct {
	// Now is the clock (default time.Now); Location the zone times are
	// shown in (default time.Local).
	Now      func() time.Time
	Location *time.Location
	// Pair pairs the machine; nil disables pairing in the settings.
	Pair PairFunc
	// Autostart and Service, when nil, leave their settings disabled.
	Autostart Autostart
	Service   Service
	// Where says how the app reaches its agent, shown in the settings
	// ("this app's own agent", "the system service at PATH").
	Where string
	// AgentProblem, when set, says why the agent does not answer (not
	// paired yet, say); it is shown instead of the bare connection error.
	AgentProblem func() string
	// Quit ends the app (default: the fyne app's Quit).
	Quit func()
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// CallTimeout bounds each call to the agent (default 10 s).
	CallTimeout time.Duration
}

// Tab indexes of the window's views.
const (
	TabSessions = iota
	TabUsage
	TabSettings
)

// UI is the companion's window and tray menu over one agent.
type UI struct {
	app   fyne.App
	win   fyne.Window
	agent agentlink.Agent
	opts  Options
	log   *slog.Logger

	tabs       *container.AppTabs
	stateText  *widget.Label
	lend       *widget.Check
	prompts    *fyne.Container
	sessions   *sessionsView
	usage      *usageView
	settings   *settingsView
	prompter   *promptsView
	lendBusy   bool
	trayKey    string
	tray       desktop.App
	trayMenu   *fyne.Menu
	trayReader trayMenuReader
	content    fyne.CanvasObject
	lastSnap   snapshot
	notified   map[string]bool

	mu      sync.Mutex // guards the fields below
	closed  bool
	actions sync.WaitGroup
	refresh chan struct{}
}

// New builds the UI in win (its content, title and shortcuts). It calls
// the agent only from Refresh, Run and the controls' actions.
func New(a fyne.App, win fyne.Window, agent agentlink.Agent, opts Options) *UI {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Location == nil {
		opts.Location = time.Local
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 10 * time.Second
	}
	if opts.Quit == nil {
		opts.Quit = a.Quit
	}
	u := &UI{
		app: a, win: win, agent: agent, opts: opts,
		log:      opts.Logger.With("component", "companion-ui"),
		notified: map[string]bool{},
		refresh:  make(chan struct{}, 1),
	}
	u.stateText = widget.NewLabel("Connecting to the agent…")
	u.lend = widget.NewCheck("Lend this machine", func(on bool) {
		if u.lendBusy {
			return
		}
		u.SetLending(on)
	})
	u.prompter = newPromptsView(u)
	u.prompts = u.prompter.box
	u.sessions = newSessionsView(u)
	u.usage = newUsageView(u)
	u.settings = newSettingsView(u)
	u.tabs = container.NewAppTabs(
		container.NewTabItem("Sessions", u.sessions.content),
		container.NewTabItem("Usage", u.usage.content),
		container.NewTabItem("Settings", u.settings.content),
	)
	header := container.NewHBox(u.stateText, layout.NewSpacer(), u.lend)
	u.content = container.NewBorder(container.NewVBox(header, widget.NewSeparator(), u.prompts), nil, nil, nil, u.tabs)
	win.SetTitle("Berth")
	win.SetContent(u.content)
	u.addShortcuts()
	return u
}

// SetQuit replaces the function that quits the app (Ctrl+Q, the tray's
// Quit).
func (u *UI) SetQuit(quit func()) { u.opts.Quit = quit }

// Content is the window's content.
func (u *UI) Content() fyne.CanvasObject { return u.content }

// Tabs are the window's views.
func (u *UI) Tabs() *container.AppTabs { return u.tabs }

// Show brings the window up, on the given tab.
func (u *UI) Show(tab int) {
	u.tabs.SelectIndex(tab)
	u.win.Show()
	u.win.RequestFocus()
}

// addShortcuts binds Ctrl+1..3 to the views, Ctrl+L to the lending
// switch, Ctrl+R to a refresh and Ctrl+Q to quit.
func (u *UI) addShortcuts() {
	c := u.win.Canvas()
	mod := fyne.KeyModifierShortcutDefault
	for i, k := range []fyne.KeyName{fyne.Key1, fyne.Key2, fyne.Key3} {
		c.AddShortcut(&desktop.CustomShortcut{KeyName: k, Modifier: mod}, func(fyne.Shortcut) { u.tabs.SelectIndex(i) })
	}
	c.AddShortcut(&desktop.CustomShortcut{KeyName: fyne.KeyL, Modifier: mod}, func(fyne.Shortcut) { u.SetLending(!u.lend.Checked) })
	c.AddShortcut(&desktop.CustomShortcut{KeyName: fyne.KeyR, Modifier: mod}, func(fyne.Shortcut) { u.kick() })
	c.AddShortcut(&desktop.CustomShortcut{KeyName: fyne.KeyQ, Modifier: mod}, func(fyne.Shortcut) { u.opts.Quit() })
}

// snapshot is one read of everything the UI shows.
type snapshot struct {
	status    control.Status
	sessions  []control.Session
	approvals []control.Approval
	usage     control.Usage
	cleanups  []control.CleanupPrompt
	settings  *control.Settings
	shots     map[string][]byte
	err       error
}

// fetch reads the agent; the settings only when withSettings.
func (u *UI) fetch(ctx context.Context, withSettings bool) snapshot {
	ctx, cancel := context.WithTimeout(ctx, u.opts.CallTimeout)
	defer cancel()
	var s snapshot
	var err error
	if s.status, err = u.agent.Status(ctx); err != nil {
		s.err = err
		return s
	}
	var errs []error
	if s.sessions, err = u.agent.Sessions(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.approvals, err = u.agent.Approvals(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.usage, err = u.agent.Usage(ctx, 14); err != nil {
		errs = append(errs, err)
	}
	if s.cleanups, err = u.agent.Cleanups(ctx); err != nil {
		errs = append(errs, err)
	}
	if withSettings {
		if st, err := u.agent.Settings(ctx); err != nil {
			errs = append(errs, err)
		} else {
			s.settings = &st
		}
	}
	s.shots = map[string][]byte{}
	for _, x := range s.sessions {
		if x.Image != "desktop" {
			continue
		}
		// A screen not up yet is no error worth showing: the preview
		// says it is waiting.
		if png, err := u.agent.Screenshot(ctx, x.ID); err == nil {
			s.shots[x.ID] = png
		}
	}
	s.err = errors.Join(errs...)
	return s
}

// Refresh reads the agent and updates the window and tray; it returns when
// both show what it read.
func (u *UI) Refresh(ctx context.Context) {
	s := u.fetch(ctx, !u.settings.loaded.Load())
	fyne.DoAndWait(func() { u.apply(s) })
}

// Run refreshes about once a second, and right after each action, until
// ctx ends; it then waits for the actions in flight.
func (u *UI) Run(ctx context.Context) {
	defer u.actions.Wait()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		u.Refresh(ctx)
		select {
		case <-ctx.Done():
			u.mu.Lock()
			u.closed = true
			u.mu.Unlock()
			return
		case <-t.C:
		case <-u.refresh:
		}
	}
}

// kick asks Run for a refresh now.
func (u *UI) kick() {
	select {
	case u.refresh <- struct{}{}:
	default:
	}
}

// Wait returns when the actions started by the controls are done.
func (u *UI) Wait() { u.actions.Wait() }

// act runs fn off the UI goroutine, then shows done's message (or the
// error) through show, and asks for a refresh.
func (u *UI) act(what string, fn func(ctx context.Context) (string, error), show func(msg string, err error)) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.actions.Add(1)
	u.mu.Unlock()
	go func() {
		defer u.actions.Done()
		ctx, cancel := context.WithTimeout(context.Background(), u.opts.CallTimeout)
		defer cancel()
		msg, err := fn(ctx)
		if err != nil {
			u.log.Warn(what+" failed", "err", err)
		}
		if show != nil {
			fyne.DoAndWait(func() { show(msg, err) })
		}
		s := u.fetch(ctx, false)
		fyne.DoAndWait(func() { u.apply(s) })
		u.kick()
	}()
}

// SetLending turns lending on or off at the agent.
func (u *UI) SetLending(on bool) {
	u.act("set lending", func(ctx context.Context) (string, error) {
		_, err := u.agent.SetLending(ctx, on)
		return "", err
	}, func(_ string, err error) {
		if err != nil {
			u.prompter.notice("lending", "Could not turn lending "+onOff(on)+": "+errText(err))
		} else {
			u.prompter.clearNotice("lending")
		}
	})
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// apply shows s; it runs on the UI goroutine.
func (u *UI) apply(s snapshot) {
	u.lastSnap = s
	now := u.opts.Now()
	if s.err != nil && s.status.Version == "" && !s.status.Lending && s.sessions == nil {
		u.stateText.SetText("Cannot reach the agent")
		why := "Cannot reach the agent: " + errText(s.err)
		if u.opts.AgentProblem != nil {
			if p := u.opts.AgentProblem(); p != "" {
				why = "The agent is not running: " + p
			}
		}
		u.prompter.notice("agent", why)
		u.lend.Disable()
		u.setTray(agentlink.StateOffline, s)
		return
	}
	u.lend.Enable()
	if s.err != nil {
		u.prompter.notice("agent", "Some of the agent's figures are missing: "+errText(s.err))
	} else {
		u.prompter.clearNotice("agent")
	}
	st := agentlink.StateOf(s.status)
	u.stateText.SetText(stateLine(st, s.status))
	u.lendBusy = true
	u.lend.SetChecked(s.status.Lending)
	u.lendBusy = false
	if s.status.Supervisor.Paired && !s.status.Relay.Online && s.status.Relay.LastError != "" {
		u.prompter.notice("relay", "Offline from the relay: "+s.status.Relay.LastError)
	} else {
		u.prompter.clearNotice("relay")
	}
	u.sessions.apply(s, now)
	u.usage.apply(s.usage)
	u.prompter.apply(s, now)
	if s.settings != nil {
		u.settings.load(*s.settings)
	}
	u.settings.applyStatus(s.status)
	u.setTray(st, s)
}

func stateLine(st agentlink.State, s control.Status) string {
	switch st {
	case agentlink.StatePaused:
		return "Lending is paused"
	case agentlink.StateOffline:
		return "Offline from the relay"
	case agentlink.StateBusy:
		return "Lending: " + plural(int64(s.Sessions), "session", "sessions") + " running"
	}
	if !s.Supervisor.Paired {
		return "Lending, not paired yet"
	}
	return "Lending, no sessions"
}

// errText is an error for people: the control API's message without its
// code and status.
func errText(err error) string {
	var ae *control.APIError
	if errors.As(err, &ae) && ae.Message != "" {
		return ae.Message
	}
	return err.Error()
}

// liveViewURL is the browser viewer of a session at the supervisor: the
// owner link the agent gives the session (control.Session.ViewURL), which
// opens the viewer page with a view token of its own.
func liveViewURL(supervisor string, s control.Session) (*url.URL, error) {
	if s.ViewURL != "" {
		return url.Parse(s.ViewURL)
	}
	if supervisor == "" {
		return nil, errors.New("not paired with a supervisor")
	}
	id := s.SessionID
	if id == "" {
		id = s.ID
	}
	return url.Parse(strings.TrimRight(supervisor, "/") + "/view/" + url.PathEscape(id))
}

func (u *UI) openURL(target *url.URL) error {
	if err := u.app.OpenURL(target); err != nil {
		return fmt.Errorf("open %s: %w", target, err)
	}
	return nil
}
