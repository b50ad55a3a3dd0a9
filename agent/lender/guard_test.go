package lender

import (
	"os/exec"
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

// TestResolveGuard: auto is the host firewall on Linux and the engine
// guard elsewhere; the engine guard keeps the host firewall on Linux,
// where an internal network still reaches the host; host is refused
// where there is no iptables; anything else is refused by name.
func TestResolveGuard(t *testing.T) {
	for _, c := range []struct {
		mode, goos string
		want       Guard
		err        string
	}{
		{"", "linux", Guard{Mode: GuardHost, Firewall: true}, ""},
		{"auto", "linux", Guard{Mode: GuardHost, Firewall: true}, ""},
		{"auto", "darwin", Guard{Mode: GuardEngine}, ""},
		{"", "windows", Guard{Mode: GuardEngine}, ""},
		{"host", "linux", Guard{Mode: GuardHost, Firewall: true}, ""},
		{"engine", "linux", Guard{Mode: GuardEngine, Firewall: true}, ""},
		{"engine", "darwin", Guard{Mode: GuardEngine}, ""},
		{"engine", "windows", Guard{Mode: GuardEngine}, ""},
		{"host", "darwin", Guard{}, "--guard engine"},
		{"host", "windows", Guard{}, "--guard engine"},
		{"iptables", "linux", Guard{}, "want auto, host or engine"},
		{"Engine", "darwin", Guard{}, "want auto, host or engine"},
	} {
		got, err := ResolveGuard(c.mode, c.goos)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ResolveGuard(%q, %q) = %+v, %v; want an error containing %q", c.mode, c.goos, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ResolveGuard(%q, %q) = %+v, %v; want %+v", c.mode, c.goos, got, err, c.want)
		}
	}
}

// TestReadSecret: one line, trimmed, within bounds.
func TestReadSecret(t *testing.T) {
	good := strings.Repeat("s", 40)
	if b, err := ReadSecret(strings.NewReader(good + "\nmore")); err != nil || string(b) != good {
		t.Fatalf("%q %v", b, err)
	}
	if b, err := ReadSecret(strings.NewReader("  " + good)); err != nil || string(b) != good {
		t.Fatalf("no newline: %q %v", b, err)
	}
	if _, err := ReadSecret(strings.NewReader("short\n")); err == nil {
		t.Fatal("a short secret was taken")
	}
	if _, err := ReadSecret(strings.NewReader(strings.Repeat("s", MaxSecretBytes+1))); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an oversized secret: %v", err)
	}
}

// TestEngineGuardFailsClosed: an agent whose egress proxy container cannot
// start (its image is missing) does not lend, says why and what to do, and
// leaves no proxy container or network behind.
func TestEngineGuardFailsClosed(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	id := "cp_eguard_fail"
	err := RunAgent(ctx, AgentOptions{
		LenderID: id, Token: "guard-token", RelayURL: "ws://127.0.0.1:1/v1/agents/connect",
		Guard: GuardEngine, EgressImage: "berth/no-such-egress-image:none",
		DataDir: t.TempDir(), Socket: "off",
		Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: "berth/test:latest"},
		Logger: testLogger(t),
	})
	if err == nil || !strings.Contains(err.Error(), "does not lend") || !strings.Contains(err.Error(), "images/build.sh supervisor") || !strings.Contains(err.Error(), EgressImageEnv) {
		t.Fatalf("RunAgent without the egress proxy image: %v, want a refusal naming the image build and %s", err, EgressImageEnv)
	}
	for _, args := range [][]string{{"container", "inspect", egressContainerName(id)}, {"network", "inspect", egressContainerName(id)}} {
		if out, err := exec.Command("docker", args...).CombinedOutput(); err == nil {
			t.Errorf("docker %s: still there after the refusal\n%s", strings.Join(args, " "), out)
		}
	}
}
