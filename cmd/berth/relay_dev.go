package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/providers/local"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
	sv "github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/daemon"
)

// devLending is berth dev's relay and its own lending agent, so that the
// local provider works out of the box.
type devLending struct {
	cmd    *cobra.Command
	srv    *relayserver.Server
	http   *http.Server
	url    string // the agents' websocket URL
	data   string
	agent  bool
	log    *slog.Logger
	svc    atomic.Pointer[sv.Service]
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startDevLending opens the relay on listen and configures o to use it:
// the local provider on, reaching agents through this relay, and the
// relay's URL in every pairing answer.
func startDevLending(cmd *cobra.Command, o *daemon.Options, listen string, agent bool) (*devLending, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--relay-listen %s: %w", listen, err)
	}
	l := &devLending{cmd: cmd, data: o.DataDir, agent: agent, log: o.Logger}
	l.srv = relayserver.New(relayserver.Config{
		Logger: o.Logger,
		Authenticate: func(tok string) (string, bool) {
			svc := l.svc.Load()
			if svc == nil {
				return "", false
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := svc.AuthenticateCompanion(ctx, tok)
			return c.ID, err == nil
		},
	})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, l.srv)
	l.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go l.http.Serve(ln)
	l.url = "ws://" + ln.Addr().String() + relay.ConnectPath
	o.Relay = local.InProcess(l.srv)
	o.RelayURL = l.url
	has := false
	for _, id := range o.Providers {
		has = has || id == local.ID
	}
	if !has {
		o.Providers = append(o.Providers, local.ID)
	}
	return l, nil
}

// devAgentFile keeps berth dev's own agent's id and token (0600), so that
// a restart lends as the same agent.
const devAgentFile = "dev-agent.json"

type devAgentCreds struct {
	LenderID string `json:"agentId"`
	Token    string `json:"token"`
}

// ready starts berth dev's own lending agent once the supervisor serves.
func (l *devLending) ready(d *daemon.Daemon, url string) {
	l.svc.Store(d.Service)
	out := l.cmd.OutOrStdout()
	fmt.Fprintf(out, "  relay for lent machines: %s\n", l.url)
	if !l.agent {
		return
	}
	ctx, cancel := context.WithCancel(l.cmd.Context())
	l.cancel = cancel
	creds, err := l.devAgent(ctx, d.Service)
	if err != nil {
		fmt.Fprintf(l.cmd.ErrOrStderr(), "berth dev: this machine's own lending agent did not start: %v\n", err)
		return
	}
	dopts, err := docker.OptionsFromConfig(providers.Config{Getenv: os.Getenv})
	if err != nil {
		fmt.Fprintf(l.cmd.ErrOrStderr(), "berth dev: this machine's own lending agent did not start: %v\n", err)
		return
	}
	dir := filepath.Join(l.data, "agent")
	sock := filepath.Join(dir, control.SocketName)
	l.wg.Go(func() {
		err := lender.RunAgent(ctx, lender.AgentOptions{
			LenderID: creds.LenderID, Token: creds.Token, RelayURL: loopbackURL(l.url), SupervisorURL: url, TURNRelay: d.TURNRelay(),
			DataDir: dir, Socket: sock, Docker: dopts, Logger: l.log.With("agent", creds.LenderID), Version: version,
		})
		if err != nil {
			fmt.Fprintf(l.cmd.ErrOrStderr(), "berth dev: lending agent stopped: %v\n", err)
		}
	})
	// Say so once the agent's link is up, so that a local computer can
	// start as soon as this is printed.
	deadline := time.Now().Add(devAgentWait)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if p, ok := l.srv.Presence(creds.LenderID); ok && p.Online {
			fmt.Fprintf(out, "  lending this machine as %s (provider local); control socket %s\n", creds.LenderID, sock)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(l.cmd.ErrOrStderr(), "berth dev: this machine's lending agent %s has not reached the relay yet; see the log\n", creds.LenderID)
}

// devAgentWait bounds how long berth dev waits for its own agent's link.
const devAgentWait = 30 * time.Second

// devAgent returns the dev agent's credentials, pairing it the first time
// (or when its token no longer works).
func (l *devLending) devAgent(ctx context.Context, svc *sv.Service) (devAgentCreds, error) {
	p := filepath.Join(l.data, devAgentFile)
	var c devAgentCreds
	b, err := os.ReadFile(p)
	if err == nil && json.Unmarshal(b, &c) == nil && c.Token != "" {
		if got, err := svc.AuthenticateCompanion(ctx, c.Token); err == nil && got.ID == c.LenderID {
			return c, nil
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	code, err := svc.CreatePairCode(ctx, sv.CreatePairCodeRequest{Name: "berth dev"})
	if err != nil {
		return c, err
	}
	paired, err := svc.Pair(ctx, sv.PairRequest{Code: code.Code})
	if err != nil {
		return c, err
	}
	c = devAgentCreds{LenderID: paired.LenderID, Token: paired.Token}
	b, _ = json.Marshal(c)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return c, err
	}
	return c, nil
}

// close stops the dev agent (its computers keep running) and the relay.
func (l *devLending) close() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
	l.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.http.Shutdown(ctx)
}

// loopbackURL is u with an unspecified host (the relay listening on every
// address) replaced by 127.0.0.1: this machine's own agent reaches its
// relay over loopback, where a plain ws:// link is allowed.
func loopbackURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	if ip, err := netip.ParseAddr(p.Hostname()); err == nil && ip.IsUnspecified() {
		p.Host = net.JoinHostPort("127.0.0.1", p.Port())
	}
	return p.String()
}
