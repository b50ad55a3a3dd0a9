package main

import (
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/tunnel"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

func init() { addSubcommand("agent", newAgentTunnelCmd) }

func newAgentTunnelCmd() *cobra.Command {
	var (
		lifetime int
		opts     tunnel.Options
	)
	cmd := &cobra.Command{
		Use:   "tunnel --connection-file PATH",
		Short: "Lend a disposable computer, fresh for each session, through a tunnel",
		Long: `Start one disposable computer on this machine's Docker engine and expose it
through cloudflared: a quick tunnel when cloudflared is on PATH, or the URL of
a named tunnel routed to --port with --url. Without cloudflared it serves on
127.0.0.1:PORT only and says so.

The computer has no host mounts, no Docker socket and no host credentials,
and the CPU, memory and process limits of COMPUTER_CPUS, COMPUTER_MEMORY_MB
and COMPUTER_PIDS. Its only way out is this command's own egress proxy, on
the docker0 address (--egress), which refuses this machine's addresses, its
LAN, loopback and the metadata address. The connection file (url and token,
readable only by you) is what a supervisor's "tunnel" connection takes. The
token grants command access to the computer. A supervisor holds the computer
for one session at a time; when the session ends the computer is destroyed
and a fresh one started, so every session starts empty. When the lifetime
ends, or on Ctrl-C, the file is removed and the computer destroyed.

With --image desktop the computer has a screen. Its live view goes through
the supervisor's TURN relay, named with --turn-relay HOST:PORT: the computer
reaches only this machine, so the command forwards a port on the docker0
address to that relay and nothing else. A relay a supervisor names is never
used; without --turn-relay the desktop runs without live view.`,
		Example: `  berth agent tunnel --connection-file ~/berth-tunnel.json
  berth agent tunnel --lifetime 3600 --connection-file conn.json --url https://computer.example.com --port 7443
  berth agent tunnel --connection-file conn.json --image desktop --turn-relay berth.example.com:3478`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if lifetime < int(tunnel.MinLifetime/time.Second) || lifetime > int(tunnel.MaxLifetime/time.Second) {
				return usagef("--lifetime %d: want %d to %d seconds", lifetime,
					int(tunnel.MinLifetime/time.Second), int(tunnel.MaxLifetime/time.Second))
			}
			if opts.Port < 0 || opts.Port > 65535 {
				return usagef("--port %d: want 0 (any free port) to 65535", opts.Port)
			}
			if e := opts.Egress.Listen; e != "" && e != "off" {
				if _, _, err := net.SplitHostPort(e); err != nil {
					return usagef("--egress %q: want HOST:PORT, :PORT or off", e)
				}
			}
			if opts.Image != providers.ImageHeadless && opts.Image != providers.ImageDesktop {
				return usagef("--image %q: want %s or %s", opts.Image, providers.ImageHeadless, providers.ImageDesktop)
			}
			if opts.TURNRelay != "" {
				if h, p, err := net.SplitHostPort(opts.TURNRelay); err != nil || h == "" || p == "" {
					return usagef("--turn-relay %q: want HOST:PORT", opts.TURNRelay)
				}
			}
			d, err := docker.OptionsFromConfig(providers.Config{Getenv: os.Getenv})
			if err != nil {
				return usageError{err}
			}
			opts.Docker = d
			opts.Lifetime = time.Duration(lifetime) * time.Second
			opts.Out = cmd.OutOrStdout()
			opts.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			opts.Docker.Logger = opts.Logger
			return tunnel.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&lifetime, "lifetime", int(tunnel.DefaultLifetime/time.Second), "seconds the computer lives (60 to 86400)")
	f.BoolVar(&opts.Unguarded, "unguarded", false, "start the computer even when the host firewall cannot close this host to it")
	f.StringVar(&opts.ConnectionFile, "connection-file", "", "where to write the connection file (must not exist)")
	f.StringVar(&opts.URL, "url", "", "a named tunnel's URL routed to --port (no quick tunnel is started)")
	f.IntVar(&opts.Port, "port", 0, "the loopback port to serve the computer on (default: any free port)")
	f.StringVar(&opts.Egress.Listen, "egress", "", "where the computer's egress proxy listens: HOST:PORT, :PORT on the docker0 address, or off for no way out (default: any free port on docker0)")
	f.StringVar(&opts.Image, "image", providers.ImageHeadless, "the computer's image: headless, or desktop for a screen")
	f.StringVar(&opts.TURNRelay, "turn-relay", "", "the supervisor's TURN relay, HOST:PORT, for live view of a desktop computer")
	cmd.MarkFlagRequired("connection-file")
	return cmd
}
