// Command berth-companion is the desktop companion: the machine owner's
// window and tray for lending this computer to AI agents. It only parses
// flags and runs app/companion.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/berthdev/berth/app/companion"
)

var version = "dev"

func main() {
	data := flag.String("data", companion.DefaultDataDir(), "the lending agent's data folder; the app attaches to the agent whose control socket answers there, or runs it itself")
	socket := flag.String("socket", "", "attach only to the agent at this control socket, never run one")
	configDir := flag.String("config-dir", os.Getenv("BERTH_CONFIG_DIR"), "where pairing credentials fall back to an encrypted file (default: the user's config directory, berth/)")
	hidden := flag.Bool("hidden", false, "start with the window hidden when the tray is up (start at login)")
	debug := flag.Bool("debug", false, "log debug messages")
	printVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *printVersion {
		fmt.Println("berth-companion", version)
		return
	}

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := companion.Run(ctx, companion.Options{
		DataDir:   *data,
		Socket:    *socket,
		ConfigDir: *configDir,
		Hidden:    *hidden,
		Version:   version,
		Logger:    log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "berth-companion:", err)
		os.Exit(1)
	}
}
