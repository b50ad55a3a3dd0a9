// Command computerd is the daemon inside every Berth computer. It serves
// exec, files and processes on port 7070 to the holder of the computer's
// token, whose SHA-256 it reads from BERTH_TOKEN_SHA256.
package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/browser"
	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/computerd/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// shutdownGrace is how long running commands get after the first signal.
const shutdownGrace = 30 * time.Second

// screenWarmWait bounds how long a desktop computer's computerd waits for
// its X server to answer before it warms the screen (desktop.WarmScreen).
const screenWarmWait = time.Minute

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fetch" {
		os.Exit(fetch(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "pause" {
		// Hold a network namespace for a computer to join, until stopped.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		return
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("computerd stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	hash := os.Getenv(computerd.EnvTokenHash)
	bindHash := os.Getenv(computerd.EnvBindHash)
	id := os.Getenv(computerd.EnvComputerID)
	expiresAt := os.Getenv(computerd.EnvExpiresAt)
	// Commands inherit computerd's environment: they must not see these.
	os.Unsetenv(computerd.EnvTokenHash)
	os.Unsetenv(computerd.EnvBindHash)
	os.Unsetenv(computerd.EnvComputerID)
	os.Unsetenv(computerd.EnvExpiresAt)
	var expired <-chan time.Time // nil: never
	if expiresAt != "" {
		t, err := time.Parse(time.RFC3339, expiresAt)
		if err != nil {
			return fmt.Errorf("%s must be an RFC 3339 time such as 2026-12-01T10:00:00Z: %w", computerd.EnvExpiresAt, err)
		}
		expired = time.After(time.Until(t))
	}
	pooled := hash == "" && bindHash != ""
	if pooled {
		// A warm-pool computer: it waits for its one bind.
		if b, err := hex.DecodeString(bindHash); err != nil || len(b) != 32 {
			return fmt.Errorf("%s must hold the hex SHA-256 of the computer's bind secret", computerd.EnvBindHash)
		}
	} else if b, err := hex.DecodeString(hash); err != nil || len(b) != 32 {
		return fmt.Errorf("%s must hold the hex SHA-256 of the computer's token", computerd.EnvTokenHash)
	}
	addr := cmp.Or(os.Getenv(computerd.EnvListen), fmt.Sprintf(":%d", computerd.Port))
	home := cmp.Or(os.Getenv("HOME"), computerd.Home)
	if home == "/" {
		home = computerd.Home
	}
	tuneMemory()

	log = log.With("computer", id)
	cfg := server.Config{TokenHash: hash, BindHash: bindHash, Home: home, ComputerID: id, Version: buildVersion(), Logger: log,
		// Every image has Chromium; where it is missing, the browser
		// tools answer so.
		Browser: &browser.LauncherConfig{Logger: log}}
	var screen *desktop.Desktop
	if os.Getenv(desktop.EnvDesktop) == "1" {
		// A bad desktop setting leaves the computer usable without its screen.
		if dc, err := desktop.ConfigFromEnv(os.Getenv); err != nil {
			log.Error("live view and screenshots are off", "err", err)
		} else {
			dc.Logger = log
			screen = desktop.New(dc)
			defer screen.Close()
			cfg.Desktop = screen
			if pooled {
				cfg.Screen = screen.ScreenState
			}
		}
	}
	srv := server.New(cfg)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := srv.Warm(ctx); err != nil {
		// The first call pays for what the warm-up did not; it still works.
		log.Warn("warm-up failed", "err", err)
	}
	if cfg.Screen != nil {
		// A pooled desktop's X server starts beside computerd: its screen
		// is warmed once it answers, while calls are already served, and
		// the health answer says when (a warm pool offers a desktop only
		// then). A desktop started for its session leaves its first
		// screenshot to it, rather than compete with its start.
		go func() {
			if err := screen.WarmScreen(ctx, screenWarmWait); err != nil && ctx.Err() == nil {
				log.Warn("the screen did not answer; the first screenshot will connect to it", "err", err)
			}
		}()
	}
	if os.Getpid() == 1 {
		go srv.ReapOrphans(ctx)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("computerd listening", "addr", ln.Addr().String(), "home", home, "version", buildVersion(), "pid1", os.Getpid() == 1)

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case sig := <-sigs:
		log.Info("shutting down; a second signal forces it", "signal", sig.String())
	case <-expired:
		log.Info("shutting down: the computer's lifetime is over", "expires", expiresAt)
	}

	// First signal: stop accepting, let running requests and commands end.
	// Second signal or the grace running out: kill what still runs.
	gctx, cancel := context.WithTimeout(ctx, shutdownGrace)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			log.Warn("forcing shutdown", "signal", sig.String())
			cancel()
		case <-gctx.Done():
		}
	}()
	err = errors.Join(hs.Shutdown(gctx), srv.Shutdown(gctx))
	if err != nil {
		srv.Close()
		hs.Close()
		log.Warn("forced shutdown", "err", err)
	}
	log.Info("computerd stopped")
	return nil
}

// tuneMemory keeps the idle daemon small unless GOGC or GOMEMLIMIT say
// otherwise: a tighter GC target, and a soft limit that makes the
// collector work harder before the heap grows past it.
func tuneMemory() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(128 << 20)
	}
}

func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return version
}
