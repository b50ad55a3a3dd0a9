package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/providers"
	_ "github.com/berthdev/berth/providers/standard"
	"github.com/berthdev/berth/supervisor/daemon"
)

func init() {
	addCommand(newDevCmd)
	addCommand(newSupervisorCmd)
}

// serverFlags are the flags `berth dev` and `berth supervisor` share.
type serverFlags struct {
	listen, data, store, logLevel string
	tlsCert, tlsKey               string
	unguarded                     bool
}

func (f *serverFlags) add(cmd *cobra.Command, listen, data string) {
	cmd.Flags().StringVar(&f.listen, "listen", listen, "address of the REST API")
	cmd.Flags().StringVar(&f.data, "data", data, "folder for the database, the sealing key and generated secrets")
	cmd.Flags().StringVar(&f.store, "store", "sqlite", "state store: sqlite, sqlite:PATH or postgres://USER:PASSWORD@HOST/DB")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate file: serve the REST API over HTTPS (with --tls-key)")
	cmd.Flags().StringVar(&f.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	cmd.Flags().BoolVar(&f.unguarded, "unguarded", false, "run Docker computers even when the host firewall cannot close this host to them (they can then reach every service it listens on)")
}

func (f *serverFlags) options(cmd *cobra.Command) (daemon.Options, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return daemon.Options{}, usagef("--log-level: %v", err)
	}
	switch {
	case f.tlsCert != "" && f.tlsKey == "":
		return daemon.Options{}, usagef("--tls-cert needs --tls-key")
	case f.tlsKey != "" && f.tlsCert == "":
		return daemon.Options{}, usagef("--tls-key needs --tls-cert")
	}
	ids, def := enabledProviders(os.Getenv)
	blocked, err := egress.ParseBlockedCIDRs(os.Getenv("EGRESS_BLOCKED_CIDRS"))
	if err != nil {
		return daemon.Options{}, err
	}
	abuse := os.Getenv("EGRESS_ABUSE")
	if abuse != "" && abuse != "on" && abuse != "off" {
		return daemon.Options{}, fmt.Errorf("EGRESS_ABUSE=%q: want on or off", abuse)
	}
	lv, err := liveViewOptions()
	if err != nil {
		return daemon.Options{}, err
	}
	return daemon.Options{
		Egress: daemon.EgressOptions{Listen: os.Getenv("EGRESS_LISTEN"), BlockedCIDRs: blocked, Abuse: abuse == "on"},
		Listen: f.listen, DataDir: f.data, Store: f.store,
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, Unguarded: f.unguarded,
		Token:               os.Getenv("SUPERVISOR_TOKEN"),
		ComputerTokenSecret: os.Getenv("COMPUTER_TOKEN_SECRET"),
		Providers:           ids,
		DefaultProvider:     def,
		Logger:              slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl})),
		LiveView:            lv,
	}, nil
}

func newDevCmd() *cobra.Command {
	var f serverFlags
	var relayListen string
	var lend bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run an all-in-one Berth on this machine (supervisor with SQLite and the local Docker engine)",
		Long: `dev runs the supervisor with the embedded SQLite store in --data and the
docker provider on the local engine. It reads SUPERVISOR_TOKEN from the
environment, or generates one, keeps it in --data and prints it. It builds
the computer images when they are missing and this is a Berth checkout.
It also runs a relay for lent machines (--relay-listen) and lends this
machine through an agent of its own (--lend), so that the local provider
works at once; other machines pair with berth agent pair and lend with
berth agent run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options(cmd)
			if err != nil {
				return err
			}
			if os.Getenv("TURN_LISTEN") == "" {
				// All-in-one: the TURN relay for live view on docker0.
				o.LiveView.Listen = ":3478"
			}
			if os.Getenv("PROVIDERS") == "" {
				// All-in-one: also computers served by `berth agent tunnel`.
				o.Providers = []string{o.DefaultProvider}
				if o.DefaultProvider != "tunnel" {
					o.Providers = append(o.Providers, "tunnel")
				}
			}
			if err := ensureImages(cmd.Context(), cmd); err != nil {
				return err
			}
			// All-in-one: a relay and this machine's own lending agent, so
			// that the local provider works out of the box.
			dl, err := startDevLending(cmd, &o, relayListen, lend)
			if err != nil {
				return err
			}
			defer dl.close()
			return serve(cmd, o, true, dl.ready)
		},
	}
	f.add(cmd, "127.0.0.1:8080", "berth-data")
	cmd.Flags().StringVar(&relayListen, "relay-listen", "127.0.0.1:8081", "address of the relay lenders' agents connect to")
	cmd.Flags().BoolVar(&lend, "lend", true, "also lend this machine through its own agent (provider local)")
	return serverRole(cmd)
}

func newSupervisorCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "supervisor",
		Short: "Run the supervisor: the REST API, the agent tools and the reaper",
		Long: `supervisor serves the REST API. Settings come from the environment:
SUPERVISOR_TOKEN, COMPUTER_TOKEN_SECRET, DEFAULT_PROVIDER, PROVIDERS (a
comma-separated list to configure besides the default) and each provider's
own settings (DOCKER_SOCKET, COMPUTER_IMAGE_HEADLESS, COMPUTER_MEMORY_MB, ...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options(cmd)
			if err != nil {
				return err
			}
			// A relay run as its own process (berth relay) checks agents'
			// tokens here; agents are told its public URL when they pair.
			o.RelayToken, o.RelayURL = os.Getenv("RELAY_TOKEN"), os.Getenv("RELAY_PUBLIC_URL")
			return serve(cmd, o, false)
		},
	}
	f.add(cmd, "127.0.0.1:8080", "/var/lib/berth")
	return serverRole(cmd)
}

// serve runs a supervisor until the command's context ends.
func serve(cmd *cobra.Command, o daemon.Options, dev bool, then ...func(*daemon.Daemon, string)) error {
	ctx := cmd.Context()
	d, err := daemon.New(ctx, o)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Serve(ctx, 20*time.Second, func(url string) {
		out := cmd.OutOrStdout()
		if !dev {
			fmt.Fprintf(out, "berth supervisor: listening on %s\n", url)
			return
		}
		fmt.Fprintf(out, "berth dev: ready at %s\n  export BERTH_URL=%s\n", url, url)
		if d.TokenGenerated || os.Getenv("SUPERVISOR_TOKEN") == "" {
			fmt.Fprintf(out, "  export SUPERVISOR_TOKEN=%s\n", d.Token)
		} else {
			fmt.Fprintf(out, "  (SUPERVISOR_TOKEN is the one in your environment)\n")
		}
		fmt.Fprintf(out, "  console: %s/ (sign in with SUPERVISOR_TOKEN)\n", strings.TrimSuffix(url, "/"))
		for _, f := range then {
			f(d, url)
		}
	})
}

// ensureImages builds the docker provider's headless image when it is
// missing and this is a Berth checkout, or says how to get it.
func ensureImages(ctx context.Context, cmd *cobra.Command) error {
	img := os.Getenv("COMPUTER_IMAGE_HEADLESS")
	if img == "" {
		img = "berth/headless:latest"
	}
	if exec.CommandContext(ctx, "docker", "image", "inspect", img).Run() == nil {
		return nil
	}
	if _, err := os.Stat("images/build.sh"); err != nil {
		return fmt.Errorf("%w: image %s is missing; build it from a Berth checkout with `make images`", providers.ErrBadImage, img)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "berth dev: image %s is missing; building it with images/build.sh\n", img)
	b := exec.CommandContext(ctx, "images/build.sh", "all")
	b.Stdout, b.Stderr = cmd.ErrOrStderr(), cmd.ErrOrStderr()
	if err := b.Run(); err != nil {
		return fmt.Errorf("build images: %w (run `make images` to see why)", err)
	}
	return nil
}

// liveViewOptions reads the live-view settings: TURN_LISTEN, TURN_TLS_LISTEN,
// TURN_TLS_CERT, TURN_TLS_KEY, TURN_SECRET, TURN_PUBLIC_HOST, DESKTOP_USERS,
// STREAM_IDLE_STOP_MS and BERTH_PUBLIC_URL.
func liveViewOptions() (daemon.LiveViewOptions, error) {
	o := daemon.LiveViewOptions{
		Listen: os.Getenv("TURN_LISTEN"), TLSListen: os.Getenv("TURN_TLS_LISTEN"),
		TLSCert: os.Getenv("TURN_TLS_CERT"), TLSKey: os.Getenv("TURN_TLS_KEY"),
		Secret: os.Getenv("TURN_SECRET"), PublicHost: os.Getenv("TURN_PUBLIC_HOST"),
		PublicURL: os.Getenv("BERTH_PUBLIC_URL"),
	}
	if v := os.Getenv("DESKTOP_USERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return o, fmt.Errorf("DESKTOP_USERS=%q: want 1..64 viewers at once", v)
		}
		o.DesktopUsers = n
	}
	if v := os.Getenv("STREAM_IDLE_STOP_MS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 86400000 {
			return o, fmt.Errorf("STREAM_IDLE_STOP_MS=%q: want 1..86400000 milliseconds", v)
		}
		o.IdleStopMS = n
	}
	if o.Secret != "" && len(o.Secret) < 16 {
		return o, fmt.Errorf("TURN_SECRET: must be at least 16 characters")
	}
	return o, nil
}
