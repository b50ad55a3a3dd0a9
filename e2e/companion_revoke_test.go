package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay/relayclient"
)

// TestRevokeCompanion unpairs a lender with a live session on its machine,
// through a relay running as its own process: the session ends and its
// computer is removed, the link is dropped, and the lender's token is
// refused from then on, so it does not come back.
func TestRevokeCompanion(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startLendingRig(t, ctx, lendingRigOptions{name: "revoked lender", relayToken: "e2e-relay-token-0123456789",
		computerSecret: "e2e-computer-token-secret-0123456789", providers: []string{"docker", "local"},
		settings: control.SettingsUpdate{MemoryMB: ptrTo(int64(512))}})
	defer r.close()
	s, id := r.s, r.paired.AgentID

	s.must("POST", "/v1/agents", map[string]any{"id": "rv1", "name": "rv1", "workspace": "lab"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "rv1", "provider": "local", "leaseSeconds": 600,
		"credentials": map[string]string{"lender": id}}, 201, nil)
	var sess session
	s.must("POST", "/v1/agents/rv1/computer/start", nil, 200, &sess)
	if len(agentContainers(t, id, false)) == 0 {
		t.Fatal("no computer on the lender's machine")
	}
	var list struct {
		Companions []struct {
			ID     string
			Online bool
		}
	}
	s.must("GET", "/v1/companions", nil, 200, &list)
	if len(list.Companions) != 1 || list.Companions[0].ID != id || !list.Companions[0].Online {
		t.Fatalf("companions: %+v", list.Companions)
	}

	var out struct{ EndedSessions int }
	s.must("DELETE", "/v1/companions/"+id, nil, 200, &out)
	if out.EndedSessions != 1 {
		t.Errorf("ended %d sessions, want 1", out.EndedSessions)
	}
	var view struct{ Session *session }
	s.must("GET", "/v1/agents/rv1/computer", nil, 200, &view)
	if view.Session != nil {
		t.Errorf("session after unpairing: %+v", view.Session)
	}
	testkit.EventuallyContext(t, ctx, "the lender offline at the relay", func() bool { return !online(r.rp, id)() })
	testkit.EventuallyContext(t, ctx, "the computer removed", func() bool { return len(agentContainers(t, id, false)) == 0 })
	if _, err := relayclient.Connect(ctx, relayclient.Config{URL: r.rp.wsURL(), Token: r.paired.Token}); !errors.Is(err, relayclient.ErrUnauthorized) {
		t.Fatalf("link with the revoked token: %v, want refused", err)
	}
	time.Sleep(2 * time.Second) // the agent's reconnects are refused too
	if online(r.rp, id)() {
		t.Fatal("the revoked lender is back online")
	}
	s.must("GET", "/v1/companions", nil, 200, &list)
	if len(list.Companions) != 0 {
		t.Errorf("companions after unpairing: %+v", list.Companions)
	}
}
