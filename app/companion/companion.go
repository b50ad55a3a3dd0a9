// Package companion runs the companion app: it reaches the lending agent
// (a system service's control socket, or an agent started in this
// process), opens the window, puts the tray icon up where a D-Bus session
// bus answers, and quits cleanly with or without one. It is the one
// package that imports fyne.io/fyne/v2/app (cgo); the UI itself is in
// app/ui.
package companion

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/driver/desktop"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/app/agentlink"
	"github.com/berthdev/berth/app/autostart"
	"github.com/berthdev/berth/app/dbusprobe"
	"github.com/berthdev/berth/app/ui"
)

// Icon is the app's icon (256x256 PNG), also used by fyne package.
//
//go:embed Icon.png
var Icon []byte

// AppID is the app's unique id (preferences, notifications, packaging).
const AppID = "dev.berth.companion"

// Options configure Run.
type Options struct {
	// Socket is the control socket of an agent installed as a system
	// service; when it answers, the app attaches to it.
	Socket string
	// StartAgent starts an agent in this process when no service answers
	// and returns its control socket and a function that stops it. Nil
	// means attach only: the window then says how to start the agent.
	StartAgent func(ctx context.Context) (socket string, stop func(), err error)
	// ConfigDir holds the pairing credentials' file fallback (default:
	// the user's config directory, berth/).
	ConfigDir string
	// Service installs and removes the agent as a system service; nil
	// leaves that setting disabled.
	Service ui.Service
	// Hidden starts with the window hidden when a tray is up.
	Hidden bool
	// Version is the app's version, sent to the supervisor when pairing.
	Version string
	Logger  *slog.Logger
}

// Run runs the app until the user quits it or ctx ends.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "companion")
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	agent, where, stop, err := connect(ctx, opts, log)
	if err != nil {
		return err
	}
	defer stop()

	// The tray only where a session bus answers: without one the tray
	// library fails, and the window is all there is. Asked before the app
	// starts, so that nothing in it autolaunches a bus.
	busErr := dbusprobe.SessionBus(ctx, 2*time.Second)
	if busErr != nil && os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
		// Without this, the D-Bus library's autolaunch would start a stray
		// session bus (dbus-launch) for the theme portal or the keyring,
		// left running after the app quits.
		os.Setenv("DBUS_SESSION_BUS_ADDRESS", "disabled:")
	}

	a := fyneapp.NewWithID(AppID)
	a.SetIcon(fyne.NewStaticResource("Icon.png", Icon))
	w := a.NewWindow("Berth")
	w.Resize(fyne.NewSize(760, 620))

	var store []credstore.Option
	if opts.ConfigDir != "" {
		store = append(store, credstore.WithDir(opts.ConfigDir))
	}
	exe, _ := os.Executable()
	var auto ui.Autostart
	if e, err := autostart.New(exe, "--hidden"); err == nil {
		auto = e
	}
	u := ui.New(a, w, agent, ui.Options{
		Where:     where,
		Autostart: auto,
		Service:   opts.Service,
		Logger:    log,
		Pair: func(ctx context.Context, url, code, name string) (agentlink.Paired, error) {
			cs, err := credstore.New(store...)
			if err != nil {
				return agentlink.Paired{}, err
			}
			return agentlink.Pair(ctx, cs, url, code, name, "berth-companion/"+opts.Version)
		},
	})

	quit := func() {
		u.DisableTray()
		a.Quit()
	}
	u.SetQuit(quit)
	a.Lifecycle().SetOnStopped(u.DisableTray)

	tray := false
	if busErr != nil {
		log.Info("no system tray", "reason", busErr)
	} else if d, ok := a.(desktop.App); ok {
		u.EnableTray(d)
		d.SetSystemTrayWindow(w)
		tray = true
		log.Info("system tray set")
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		u.Run(ctx)
	}()
	ran := make(chan struct{})
	go func() {
		select {
		case <-parent.Done():
			fyne.Do(quit)
		case <-ran:
		}
	}()
	if !tray || !opts.Hidden {
		w.Show()
	}
	log.Info("companion running", "agent", where, "tray", tray)
	a.Run()
	close(ran)
	cancel()
	<-done
	log.Info("companion quit")
	return nil
}

// connect attaches to the service's socket when it answers, or else
// starts the in-process agent.
func connect(ctx context.Context, opts Options, log *slog.Logger) (agentlink.Agent, string, func(), error) {
	if opts.Socket != "" {
		if c, err := attach(ctx, opts.Socket); err == nil {
			return c, "the system service at " + opts.Socket, c.Close, nil
		} else if opts.StartAgent == nil {
			log.Warn("agent not reachable", "socket", opts.Socket, "err", err)
		}
	}
	if opts.StartAgent == nil {
		if opts.Socket == "" {
			return nil, "", nil, errors.New("companion: no agent socket and no agent to start")
		}
		// The window says the agent is unreachable and keeps trying.
		c := control.NewClient(opts.Socket)
		return c, "the agent at " + opts.Socket + " (not answering yet)", c.Close, nil
	}
	sock, stop, err := opts.StartAgent(ctx)
	if err != nil {
		return nil, "", nil, fmt.Errorf("companion: start the agent: %w", err)
	}
	c := control.NewClient(sock)
	return c, "this app's own agent", func() { c.Close(); stop() }, nil
}

// attach returns a client of the control socket at path when the agent
// there answers within two seconds.
func attach(ctx context.Context, path string) (*control.Client, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("%s is not a socket", path)
	}
	c := control.NewClient(path)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DefaultSocket is where the system service's control socket is looked
// for: $BERTH_AGENT_SOCKET, or the service's data folder.
func DefaultSocket() string {
	if s := os.Getenv("BERTH_AGENT_SOCKET"); s != "" {
		return s
	}
	return filepath.Join("/var/lib/berth-agent", control.SocketName)
}
