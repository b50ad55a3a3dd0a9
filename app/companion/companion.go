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
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// Icon is the app's icon (256x256 PNG), also used by fyne package.
//
//go:embed Icon.png
var Icon []byte

// AppID is the app's unique id (preferences, notifications, packaging).
const AppID = "dev.berth.companion"

// Options configure Run.
type Options struct {
	// DataDir is the lending agent's data folder (default
	// DefaultDataDir()). When its control socket answers (a service, or
	// berth agent run), the app attaches to that agent; otherwise it runs
	// the agent itself, on the same folder and socket.
	DataDir string
	// Socket, when set, is the only control socket the app attaches to;
	// it then never runs an agent itself.
	Socket string
	// Docker configures the app's own agent's computers (default: from
	// the environment, as berth agent run).
	Docker *docker.Options
	// ConfigDir holds the pairing credentials' file fallback (default:
	// the user's config directory, berth/).
	ConfigDir string
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

	var store []credstore.Option
	if opts.ConfigDir != "" {
		store = append(store, credstore.WithDir(opts.ConfigDir))
	}
	creds, err := credstore.New(store...)
	if err != nil {
		return err
	}
	agent, where, r, err := connect(ctx, opts, creds, log)
	if err != nil {
		return err
	}
	defer agent.Close()
	if r != nil {
		r.Start(ctx)
		defer func() {
			cancel()
			r.Wait()
		}()
	}
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = DefaultDataDir()
	}
	var svc ui.Service
	if opts.Socket == "" {
		svc = newServiceCtl(dataDir, r)
	}

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

	exe, _ := os.Executable()
	var auto ui.Autostart
	if e, err := autostart.New(exe, "--hidden"); err == nil {
		auto = e
	}
	u := ui.New(a, w, agent, ui.Options{
		Where:     where,
		Autostart: auto,
		Service:   svc,
		Logger:    log,
		Pair: func(ctx context.Context, url, code, name string) (agentlink.Paired, error) {
			p, err := agentlink.Pair(ctx, creds, url, code, name, "berth-companion/"+opts.Version)
			if err == nil && r != nil {
				r.Restart() // the app's agent starts with the new pairing
			}
			return p, err
		},
		AgentProblem: func() string {
			if r == nil {
				return ""
			}
			return r.Problem()
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

// connect attaches to the agent whose control socket answers, or else
// prepares the app's own agent (r, started by the caller).
func connect(ctx context.Context, opts Options, creds *credstore.Store, log *slog.Logger) (c *control.Client, where string, r *runner, err error) {
	if opts.Socket != "" {
		if c, err := attach(ctx, opts.Socket); err == nil {
			return c, "the agent at " + opts.Socket, nil, nil
		} else {
			log.Warn("agent not reachable", "socket", opts.Socket, "err", err)
		}
		return control.NewClient(opts.Socket), "the agent at " + opts.Socket + " (not answering yet)", nil, nil
	}
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = DefaultDataDir()
	}
	socket := filepath.Join(dataDir, control.SocketName)
	if c, err := attach(ctx, socket); err == nil {
		return c, "the agent service at " + socket, nil, nil
	}
	var dopts docker.Options
	if opts.Docker != nil {
		dopts = *opts.Docker
	} else if dopts, err = docker.OptionsFromConfig(providers.Config{Getenv: os.Getenv}); err != nil {
		return nil, "", nil, fmt.Errorf("companion: Docker settings: %w", err)
	}
	r = newRunner(dataDir, dopts, creds, opts.Version, log)
	return control.NewClient(socket), "this app's own agent (" + dataDir + ")", r, nil
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
