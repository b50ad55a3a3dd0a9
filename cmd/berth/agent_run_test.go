package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/agent/credstore"
)

// TestAgentRunNeedsPairing: run refuses to start on a machine that is not
// paired, and names the command that pairs it.
func TestAgentRunNeedsPairing(t *testing.T) {
	pairEnv(t)
	r := run(t, "", "agent", "run", "--data", t.TempDir())
	if r.code != exitUsage || !strings.Contains(r.stderr, "this machine is not paired: run berth agent pair CODE --supervisor URL first") {
		t.Fatalf("run without pairing: %d %q", r.code, r.stderr)
	}
}

// TestAgentPairKeepsRelay: the relay named in the pairing answer is kept
// for berth agent run; without one, run asks for --relay.
func TestAgentPairKeepsRelay(t *testing.T) {
	dir := pairEnv(t)
	s := newSupervisor(t)
	s.on("POST /v1/companions/pair", http.StatusCreated, `{"agentId":"cp_abc","token":"`+pairToken+`","relayUrl":"wss://relay.example/v1/agents/connect"}`)
	run(t, "", "agent", "pair", "ABCD-EFGH-JK", "--supervisor", s.URL).want(t, 0,
		"paired as companion cp_abc with "+s.URL+"; token kept in an encrypted file in "+dir+" (no OS keyring available)\n", "")
	cs, err := credstore.New(credstore.WithDir(dir), credstore.FileOnly())
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.Load()
	if err != nil || got.RelayURL != "wss://relay.example/v1/agents/connect" {
		t.Fatalf("stored %+v %v", got, err)
	}

	got.RelayURL = ""
	if _, err := cs.Save(got); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "agent", "run", "--data", filepath.Join(t.TempDir(), "agent"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "the supervisor named no relay when this machine paired: give --relay") {
		t.Fatalf("run without a relay: %d %q", r.code, r.stderr)
	}
}

// TestRelayNeedsToken: berth relay does not start without RELAY_TOKEN or
// a supervisor to check tokens with.
func TestRelayNeedsToken(t *testing.T) {
	t.Setenv("RELAY_TOKEN", "")
	r := run(t, "", "relay", "--supervisor", "http://127.0.0.1:1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "RELAY_TOKEN: set it to a secret of at least 16 characters") {
		t.Fatalf("relay without a token: %d %q", r.code, r.stderr)
	}
	t.Setenv("RELAY_TOKEN", "relay-token-0123456789")
	t.Setenv("SUPERVISOR_URL", "")
	r = run(t, "", "relay", "--supervisor", "")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--supervisor: the supervisor's URL is required") {
		t.Fatalf("relay without a supervisor: %d %q", r.code, r.stderr)
	}
}

// TestAgentRunRefusesPlainWS: a plain ws:// relay to a host that is not
// loopback is a usage error naming --insecure.
func TestAgentRunRefusesPlainWS(t *testing.T) {
	dir := pairEnv(t)
	cs, err := credstore.New(credstore.WithDir(dir), credstore.FileOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Save(credstore.Credentials{LenderID: "cp_abc", Token: pairToken, SupervisorURL: "https://berth.example.com",
		RelayURL: "ws://192.0.2.10:8081/v1/agents/connect"}); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "agent", "run", "--data", filepath.Join(t.TempDir(), "agent"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "--insecure") || !strings.Contains(r.stderr, "ws://192.0.2.10:8081/v1/agents/connect") {
		t.Fatalf("run with a plain ws:// relay: %d %q", r.code, r.stderr)
	}
}

// TestAgentRunGuardFlag: --guard takes auto, host or engine; anything else
// is a usage error naming them, before anything else is checked. The
// egress proxy command is hidden and reads its secret from stdin only.
func TestAgentRunGuardFlag(t *testing.T) {
	pairEnv(t)
	r := run(t, "", "agent", "run", "--data", t.TempDir(), "--guard", "iptables")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--guard") || !strings.Contains(r.stderr, "want auto, host or engine") {
		t.Fatalf("run --guard iptables: %d %q", r.code, r.stderr)
	}
	r = run(t, "", "agent", "run", "--data", t.TempDir(), "--guard", "engine")
	if r.code != exitUsage || !strings.Contains(r.stderr, "not paired") {
		t.Fatalf("run --guard engine without pairing: %d %q", r.code, r.stderr)
	}
	if r := run(t, "", "agent", "--help"); strings.Contains(r.stdout, "egress-proxy") {
		t.Fatalf("the egress proxy command is listed: %q", r.stdout)
	}
	r = run(t, "short\n", "agent", "egress-proxy", "--listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "egress secret") {
		t.Fatalf("egress-proxy with a short secret on stdin: %d %q", r.code, r.stderr)
	}
}
