package e2e

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor/daemon"
)

// lendingRig is a lent machine as the lending tests use it: a supervisor
// on loopback, a relay process between it and the agents, and a lending
// agent on this machine's Docker engine, paired with the supervisor,
// connected, with the owner's settings applied.
type lendingRig struct {
	t      *testing.T
	logs   *syncbuf.Buffer
	log    *slog.Logger
	opts   lendingRigOptions
	supURL string
	rp     *relayProc // a test that restarts the relay sets the new one
	remote *relayserver.Remote
	d      *daemon.Daemon
	s      *super
	paired struct{ AgentID, Token, RelayURL string }
	l      *lender.Lender
	owner  *control.Client

	stopSup, stopAgent context.CancelFunc
	supDone, agentDone chan error
	agentStopped       bool
}

type lendingRigOptions struct {
	name           string // the lender's name at pairing
	relayToken     string
	computerSecret string
	// The supervisor's egress proxy (EGRESS_LISTEN), providers and default.
	egress          string
	providers       []string
	defaultProvider string
	// The agent's egress proxy, and the owner's settings once it runs.
	agentEgress lender.EgressOptions
	settings    control.SettingsUpdate
}

// startLendingRig starts the rig; close (deferred by the caller) stops the
// agent, the supervisor and the relay, in that order.
func startLendingRig(t *testing.T, ctx context.Context, o lendingRigOptions) *lendingRig {
	t.Helper()
	r := &lendingRig{t: t, logs: syncbuf.Logged(t.Log), opts: o}
	r.log = slog.New(slog.NewTextHandler(r.logs, nil))

	// Addresses first: the supervisor names the relay, the relay the supervisor.
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.supURL = "http://" + sln.Addr().String()
	r.rp = startRelay(t, "127.0.0.1:0", "127.0.0.1:0", r.supURL, o.relayToken, r.log)
	if r.remote, err = relayserver.NewRemote("http://"+r.rp.interAddr, o.relayToken, nil); err != nil {
		r.rp.kill()
		t.Fatal(err)
	}
	env := map[string]string{"COMPUTER_IMAGE_HEADLESS": "berth/test:latest", "COMPUTER_MEMORY_MB": "512", "COMPUTER_NETWORK_POOL": "0"}
	r.d, err = daemon.New(ctx, daemon.Options{
		Egress: daemon.EgressOptions{Listen: o.egress}, Providers: o.providers, DefaultProvider: o.defaultProvider,
		DataDir: t.TempDir(), Token: "e2e-operator-token-0123456789", ComputerTokenSecret: o.computerSecret,
		Getenv: func(k string) string { return env[k] }, Logger: r.log,
		Relay: r.remote, RelayURL: r.rp.wsURL(), RelayToken: o.relayToken,
	})
	if err != nil {
		r.rp.kill()
		t.Fatal(err)
	}
	var sctx context.Context
	sctx, r.stopSup = context.WithCancel(ctx)
	r.supDone = make(chan error, 1)
	go func() { r.supDone <- r.d.ServeListener(sctx, sln, 5*time.Second, nil) }()
	r.s = &super{t: t, url: r.supURL, token: r.d.Token, d: r.d}

	// Pair the agent: the answer names the relay.
	var code struct{ Code string }
	r.s.must("POST", "/v1/companions/pair-codes", map[string]any{"name": o.name}, 201, &code)
	if st, err := callAPI(r.supURL, "", "POST", "/v1/companions/pair", "", map[string]any{"code": code.Code}, &r.paired); err != nil || st != 201 {
		r.close()
		t.Fatalf("pair: %d %v", st, err)
	}

	adir := t.TempDir()
	sock := filepath.Join(adir, control.SocketName)
	ready := make(chan *lender.Lender, 1)
	var actx context.Context
	actx, r.stopAgent = context.WithCancel(ctx)
	r.agentDone = make(chan error, 1)
	go func() {
		r.agentDone <- lender.RunAgent(actx, lender.AgentOptions{
			LenderID: r.paired.AgentID, Token: r.paired.Token, RelayURL: r.paired.RelayURL, SupervisorURL: r.supURL,
			DataDir: adir, Socket: sock, Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: "berth/test:latest"},
			Egress: o.agentEgress,
			Logger: r.log.With("side", "agent"), Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
		})
	}()
	select {
	case r.l = <-ready:
	case err := <-r.agentDone:
		r.agentStopped = true
		r.close()
		t.Fatalf("agent ended: %v", err)
	}
	r.owner = control.NewClient(sock)
	if _, err := r.owner.UpdateSettings(ctx, o.settings); err != nil {
		r.close()
		t.Fatal(err)
	}
	testkit.EventuallyContext(t, ctx, "the agent online at the relay", online(r.rp, r.paired.AgentID))
	return r
}

// stopLending stops the agent, once, and reports its error.
func (r *lendingRig) stopLending() {
	if r.agentStopped {
		return
	}
	r.agentStopped = true
	r.stopAgent()
	if err := <-r.agentDone; err != nil {
		r.t.Errorf("agent: %v", err)
	}
}

// close stops the agent, the supervisor and the relay.
func (r *lendingRig) close() {
	if r.owner != nil {
		r.owner.Close()
	}
	if r.stopAgent != nil {
		r.stopLending()
	}
	r.stopSup()
	<-r.supDone
	r.d.Close()
	r.rp.kill()
}
