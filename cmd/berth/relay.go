package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
)

func init() { addCommand(newRelayCmd) }

func newRelayCmd() *cobra.Command {
	var listen, internal, advertise, supervisorURL, cert, key, logLevel string
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay that lenders' agents connect out to",
		Long: `relay accepts lenders' agents (berth agent run) on --listen, over a websocket
at ` + relay.ConnectPath + ` (TLS with --tls-cert and --tls-key), and checks each
agent's token with the supervisor at --supervisor. Its internal API on
--internal-listen, for the supervisor only, reports presence and carries HTTP
requests to agents. Both the token checks and the internal API are guarded by
RELAY_TOKEN, which the supervisor must share (its RELAY_TOKEN, with RELAY_URL
naming --internal-listen).

Several relays: each reports the lenders it holds to the supervisor every
two seconds and at each connect and disconnect, naming itself by --advertise
(its internal API as supervisors reach it; default http://--internal-listen
when that names a host). Supervisors with RELAY_URL=lookup record the reports
in their store with a six-second lease and reach each lender through the
relay that holds it; lenders' agents given several relay URLs move to the
next one when theirs goes away.`,
		Example: `  RELAY_TOKEN=... berth relay --listen :8443 --tls-cert relay.crt --tls-key relay.key \
    --internal-listen 10.0.0.5:8081 --supervisor http://10.0.0.4:8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level: %v", err)
			}
			token := os.Getenv("RELAY_TOKEN")
			if len(token) < 16 {
				return usagef("RELAY_TOKEN: set it to a secret of at least 16 characters, the same as the supervisor's")
			}
			if supervisorURL == "" {
				return usagef("--supervisor: the supervisor's URL is required (it checks agents' tokens)")
			}
			if (cert == "") != (key == "") {
				return usagef("--tls-cert and --tls-key go together")
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			srv := relayserver.New(relayserver.Config{
				Authenticate: relayserver.SupervisorAuth(supervisorURL, token, nil, func(msg string, args ...any) { log.Warn(msg, args...) }),
				Logger:       log,
			})
			return runRelay(cmd.Context(), cmd, srv, relayRun{token: token, listen: listen, internal: internal, advertise: advertise,
				supervisor: supervisorURL, cert: cert, key: key, log: log})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":8443", "address agents connect to")
	f.StringVar(&internal, "internal-listen", "127.0.0.1:8081", "address of the internal API for the supervisor")
	f.StringVar(&advertise, "advertise", "", "this relay's internal API as supervisors reach it, reported with its lenders (default http://--internal-listen when that names a host; \"off\" reports nothing)")
	f.StringVar(&supervisorURL, "supervisor", os.Getenv("SUPERVISOR_URL"), "the supervisor's URL, for token checks ($SUPERVISOR_URL)")
	f.StringVar(&cert, "tls-cert", "", "TLS certificate for --listen")
	f.StringVar(&key, "tls-key", "", "TLS key for --listen")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return serverRole(cmd)
}

// relayRun is what runRelay serves.
type relayRun struct {
	token, listen, internal, cert, key string
	// advertise and supervisor, when both are set, turn reports on.
	advertise, supervisor string
	log                   *slog.Logger
}

// runRelay serves the agents' endpoint and the internal API until ctx
// ends, reporting its lenders to the supervisor.
func runRelay(ctx context.Context, cmd *cobra.Command, srv *relayserver.Server, o relayRun) error {
	token, listen, internal, cert, key := o.token, o.listen, o.internal, o.cert, o.key
	aln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	iln, err := net.Listen("tcp", internal)
	if err != nil {
		aln.Close()
		return fmt.Errorf("--internal-listen %s: %w", internal, err)
	}
	advertise := o.advertise
	if advertise == "" {
		if ap, err := netip.ParseAddrPort(iln.Addr().String()); err == nil && !ap.Addr().IsUnspecified() {
			advertise = "http://" + ap.String()
		}
	}
	if advertise != "" && advertise != "off" && o.supervisor != "" {
		if err := relayserver.CheckRelayURL(advertise); err != nil {
			aln.Close()
			iln.Close()
			return usagef("--advertise: %v", err)
		}
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go srv.Report(rctx, relayserver.ReportConfig{SupervisorURL: o.supervisor, Token: token, Advertise: advertise})
		o.log.Info("reporting lenders to the supervisor", "advertise", advertise)
	} else if o.supervisor != "" && advertise == "" {
		o.log.Info("not reporting lenders: --internal-listen names no host; give --advertise for several relays")
	}
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, srv)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	agents := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	in := &http.Server{Handler: srv.InternalHandler(token), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if cert != "" {
			errc <- agents.ServeTLS(aln, cert, key)
			return
		}
		errc <- agents.Serve(aln)
	}()
	go func() { errc <- in.Serve(iln) }()
	scheme := "ws"
	if cert != "" {
		scheme = "wss"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "berth relay: agents connect to %s://%s%s; internal API on http://%s\n",
		scheme, aln.Addr(), relay.ConnectPath, iln.Addr())
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	srv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	agents.Shutdown(sctx)
	in.Shutdown(sctx)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
