package lender

import (
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/providers/docker"
)

// TestAgentGuardFailsClosed: an agent that cannot close this machine to
// lent computers (here: no iptables on its PATH, as for an agent run as a
// user without the tools) does not lend, and says why and what to do.
func TestAgentGuardFailsClosed(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, time.Minute)
	t.Setenv("PATH", t.TempDir())
	err := RunAgent(ctx, AgentOptions{
		LenderID: "cp_guard", Token: "guard-token", RelayURL: "ws://127.0.0.1:1/v1/agents/connect",
		DataDir: t.TempDir(), Socket: "off", Egress: EgressOptions{Listen: "off"},
		Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: "berth/test:latest"},
		Logger: testLogger(t),
	})
	if err == nil || !strings.Contains(err.Error(), "--unguarded") || !strings.Contains(err.Error(), "service install") {
		t.Fatalf("RunAgent without a host firewall: %v, want a refusal naming --unguarded and the service", err)
	}
}
