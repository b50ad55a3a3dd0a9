package e2e

import (
	"context"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
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
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startLendingRig(t, ctx, lendingRigOptions{name: "pool lender", relayToken: "e2e-relay-token-pool-0123456789",
		computerSecret: "e2e-computer-token-secret-pool-0123456789", egress: "off", providers: []string{"local"}, defaultProvider: "local",
		agentEgress: lender.EgressOptions{Listen: ":0"}, settings: control.SettingsUpdate{MemoryMB: ptrTo(int64(512)), WarmPoolSize: ptrTo(1)}})
	defer r.close()
	s, paired, l, owner, d := r.s, r.paired, r.l, r.owner, r.d
	t.Cleanup(func() {
		for _, name := range agentContainers(t, paired.AgentID, false) {
			exec.Command("docker", "rm", "-f", "-v", name).Run()
		}
	})
	waitWaiting := func(n int) control.Status {
		t.Helper()
		var st control.Status
		var err error
		if !testkit.PollContext(ctx, time.Hour, func() bool {
			st, err = owner.Status(ctx)
			return err == nil && st.WarmPool.Waiting == n && st.WarmPool.Creating == 0
		}) {
			t.Fatalf("warm pool: %+v %v; want %d waiting", st.WarmPool, err, n)
		}
		return st
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
	r.stopLending()
	if names := agentContainers(t, paired.AgentID, false); len(names) != 0 {
		t.Fatalf("after the agent's shutdown: %v", names)
	}
}
