package e2e

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor/daemon"
)

// agentContainers lists the containers of a lending agent's deployment;
// pool limits them to those made for its warm pool (waiting or claimed).
func agentContainers(t *testing.T, agentID string, pool bool) []string {
	t.Helper()
	args := []string{"ps", "-a", "--filter", "label=" + providers.LabelDeployment + "=" + lender.Deployment(agentID), "--format", "{{.Names}}"}
	if pool {
		args = append(args, "--filter", "label="+providers.LabelPool+"=true")
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	names := strings.Fields(string(out))
	slices.Sort(names)
	return names
}

// TestLendingWarmPool: a supervisor starts a computer on a lent machine
// through the relay, and the lending agent answers it from its warm pool:
// the session runs in the computer that was waiting, with the agent's
// egress proxy and its own credentials, the owner's status counts the
// claim, the pool refills, a stop removes the used computer, and the
// agent's shutdown removes what waits.
func TestLendingWarmPool(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logs := syncbuf.Logged(t.Log)
	log := slog.New(slog.NewTextHandler(logs, nil))
	const relayToken = "e2e-relay-token-pool-0123456789"

	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	supURL := "http://" + sln.Addr().String()
	rp := startRelay(t, "127.0.0.1:0", "127.0.0.1:0", supURL, relayToken, log)
	defer rp.kill()
	remote, err := relayserver.NewRemote("http://"+rp.interAddr, relayToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPUTER_IMAGE_HEADLESS": "berth/test:latest", "COMPUTER_MEMORY_MB": "512", "COMPUTER_NETWORK_POOL": "0"}
	d, err := daemon.New(ctx, daemon.Options{
		Egress: daemon.EgressOptions{Listen: "off"}, Providers: []string{"local"}, DefaultProvider: "local",
		DataDir: t.TempDir(), Token: "e2e-operator-token-0123456789", ComputerTokenSecret: "e2e-computer-token-secret-pool-0123456789",
		Getenv: func(k string) string { return env[k] }, Logger: log,
		Relay: remote, RelayURL: rp.wsURL(), RelayToken: relayToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSup := context.WithCancel(ctx)
	supDone := make(chan error, 1)
	go func() { supDone <- d.ServeListener(sctx, sln, 5*time.Second, nil) }()
	defer func() {
		stopSup()
		<-supDone
		d.Close()
	}()
	s := &super{t: t, url: supURL, token: d.Token, d: d}

	var code struct{ Code string }
	s.must("POST", "/v1/companions/pair-codes", map[string]any{"name": "pool lender"}, 201, &code)
	var paired struct{ AgentID, Token, RelayURL string }
	if st, err := callAPI(supURL, "", "POST", "/v1/companions/pair", "", map[string]any{"code": code.Code}, &paired); err != nil || st != 201 {
		t.Fatalf("pair: %d %v", st, err)
	}

	adir := t.TempDir()
	sock := filepath.Join(adir, control.SocketName)
	ready := make(chan *lender.Lender, 1)
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- lender.RunAgent(actx, lender.AgentOptions{
			AgentID: paired.AgentID, Token: paired.Token, RelayURL: paired.RelayURL, SupervisorURL: supURL,
			DataDir: adir, Socket: sock, Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: "berth/test:latest"},
			Egress: lender.EgressOptions{Listen: ":0"},
			Logger: log.With("side", "agent"), Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
		})
	}()
	agentStopped := false
	stop := func() {
		if agentStopped {
			return
		}
		agentStopped = true
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
	defer stop()
	t.Cleanup(func() {
		for _, name := range agentContainers(t, paired.AgentID, false) {
			exec.Command("docker", "rm", "-f", "-v", name).Run()
		}
	})
	var l *lender.Lender
	select {
	case l = <-ready:
	case err := <-agentDone:
		t.Fatalf("agent ended: %v", err)
	}
	owner := control.NewClient(sock)
	defer owner.Close()
	if _, err := owner.UpdateSettings(ctx, control.SettingsUpdate{MemoryMB: ptrTo(int64(512)), WarmPoolSize: ptrTo(1)}); err != nil {
		t.Fatal(err)
	}
	waitOnline(t, ctx, rp, paired.AgentID)
	waitWaiting := func(n int) control.Status {
		t.Helper()
		for {
			st, err := owner.Status(ctx)
			if err == nil && st.WarmPool.Waiting == n && st.WarmPool.Creating == 0 {
				return st
			}
			if ctx.Err() != nil {
				t.Fatalf("warm pool: %+v %v; want %d waiting", st.WarmPool, err, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	st := waitWaiting(1)
	waitingBefore := agentContainers(t, paired.AgentID, true)
	if len(waitingBefore) != 1 {
		t.Fatalf("pool containers: %v", waitingBefore)
	}

	s.must("POST", "/v1/agents", map[string]any{"id": "lpool", "name": "lpool", "workspace": "lab"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "lpool", "provider": "local", "leaseSeconds": 600,
		"credentials": map[string]string{"lender": paired.AgentID}}, 201, nil)
	var sess session
	s.must("POST", "/v1/agents/lpool/computer/start", nil, 200, &sess)
	if sess.Provider != "local" || sess.State != "running" {
		t.Fatalf("start: %+v", sess)
	}
	cs := l.Computers()
	if len(cs) != 1 || cs[0].MachineID != waitingBefore[0] {
		t.Fatalf("the session runs in %+v, not in the waiting computer %s", cs, waitingBefore[0])
	}
	x := s.exec("lpool", "id -u; echo $HTTP_PROXY; echo [$BERTH_BIND_SHA256]")
	lines := strings.Split(strings.TrimSpace(x.Stdout), "\n")
	if x.ExitCode != 0 || len(lines) != 3 || lines[0] != "1000" || lines[2] != "[]" {
		t.Fatalf("exec in the pooled computer: %+v", x)
	}
	if u, err := url.Parse(lines[1]); err != nil || u.User.Username() != cs[0].ComputerID || u.Host != st.Egress.Address {
		t.Fatalf("proxy %q: want the agent's %s as computer %s", lines[1], st.Egress.Address, cs[0].ComputerID)
	}
	if ss, err := owner.Sessions(ctx); err != nil || len(ss) != 1 || ss[0].Agent != "lpool" || ss[0].Workspace != "lab" {
		t.Fatalf("owner's sessions: %+v %v", ss, err)
	}
	if st := waitWaiting(1); st.WarmPool.Claimed != 1 {
		t.Fatalf("warm pool after the claim: %+v", st.WarmPool)
	}
	if rep, err := d.Service.Reconcile(ctx); err != nil || rep.Machines != 1 || rep.Kept != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}

	s.must("POST", "/v1/agents/lpool/computer/stop", nil, 200, nil)
	if slices.Contains(agentContainers(t, paired.AgentID, false), waitingBefore[0]) {
		t.Fatalf("the used computer %s is still there", waitingBefore[0])
	}
	if len(l.Computers()) != 0 {
		t.Fatalf("computers after the stop: %+v", l.Computers())
	}
	waitWaiting(1)
	stop()
	if names := agentContainers(t, paired.AgentID, false); len(names) != 0 {
		t.Fatalf("after the agent's shutdown: %v", names)
	}
}
