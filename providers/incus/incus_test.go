package incus

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// osMkdirTempShort makes a folder with a short path: a unix socket's path
// is limited to 108 bytes.
func osMkdirTempShort() (string, error) { return os.MkdirTemp("/tmp", "incus-") }

func removeAll(dir string) { os.RemoveAll(dir) }

func newTest(t *testing.T, f *fakeIncus, log *slog.Logger) *Incus {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p, err := New(Options{URL: "unix://" + f.Socket, Registry: "https://registry.example", Project: "berth", PollInterval: 5 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func spec() providers.Spec {
	return providers.Spec{ComputerID: "c1", SessionID: "s_c1", AttemptID: "a_1", AgentID: "ag", Deployment: "d_1",
		TokenHash: strings.Repeat("ab", 32), Env: map[string]string{"TURN_PUBLIC_HOST": "turn.example"}, Lease: time.Minute}
}

// TestCreateConfig checks what a container is made with: the OCI source,
// limits, environment and Berth's labels in user.berth.* keys.
func TestCreateConfig(t *testing.T) {
	f := newFakeIncus(t)
	p := newTest(t, f, nil)
	m, err := p.Create(t.Context(), spec())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy(t.Context(), m.ID)
	in := f.instances[m.ID]
	if in == nil || in.Project != "berth" {
		t.Fatalf("instance %v in project %v", m.ID, in)
	}
	for k, want := range map[string]string{
		"limits.memory": "2048MiB", "limits.cpu": "1", "security.privileged": "false", "limits.memory.swap": "false",
		"environment.BERTH_TOKEN_SHA256": strings.Repeat("ab", 32), "environment.TURN_PUBLIC_HOST": "turn.example",
		"user.berth.managed": "true", "user.berth.attempt": "a_1", "user.berth.agent": "ag", "user.berth.deployment": "d_1",
	} {
		if in.Config[k] != want {
			t.Errorf("config %s = %q, want %q", k, in.Config[k], want)
		}
	}
	// Incus has no lifetime of its own: computerd ends the container a
	// minute after the lease.
	at, err := time.Parse(time.RFC3339, in.Config["environment."+computerd.EnvExpiresAt])
	if want := time.Now().Add(time.Minute + providers.LeaseGrace); err != nil || at.Before(want.Add(-time.Minute)) || at.After(want.Add(time.Second)) {
		t.Errorf("environment.%s = %q (%v), want about %v", computerd.EnvExpiresAt, in.Config["environment."+computerd.EnvExpiresAt], err, want)
	}
	if !strings.HasSuffix(m.Endpoint, ":7070") || m.Labels[providers.LabelAttempt] != "a_1" {
		t.Errorf("machine %+v", m)
	}
	ms, err := p.List(t.Context())
	if err != nil || len(ms) != 1 || ms[0].Labels[providers.LabelSession] != "s_c1" {
		t.Errorf("List = %+v, %v", ms, err)
	}
}

// TestErrors maps the server's answers.
func TestErrors(t *testing.T) {
	f := newFakeIncus(t)
	p := newTest(t, f, nil)
	f.Refuse = true
	if _, err := p.Create(t.Context(), spec()); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("untrusted: %v", err)
	}
	f.Refuse = false
	f.failCreates = 1
	if _, err := p.Create(t.Context(), spec()); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("503: %v", err)
	}
	bad, err := New(Options{URL: "unix://" + f.Socket, Registry: "https://r.example", HeadlessImage: "missing:latest", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Create(t.Context(), spec()); !errors.Is(err, providers.ErrBadImage) {
		t.Errorf("missing image: %v", err)
	}
	if err := p.Destroy(t.Context(), "berth-c-gone"); err != nil {
		t.Errorf("destroy of a gone container: %v", err)
	}
	down, _ := New(Options{URL: "unix:///nonexistent/incus.socket", Registry: "https://r.example"})
	if _, err := down.List(t.Context()); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("no server: %v", err)
	}
}

// TestSettings checks that bad settings are refused by name.
func TestSettings(t *testing.T) {
	cases := map[string]Options{
		SettingRegistry:   {URL: DefaultURL},
		SettingURL:        {URL: "ftp://x", Registry: "https://r"},
		SettingClientCert: {URL: "https://incus:8443", Registry: "https://r"},
		SettingProject:    {Registry: "https://r", Project: "bad project"},
	}
	for name, o := range cases {
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := OptionsFromConfig(providers.Config{Getenv: func(k string) string {
		if k == SettingMemoryMB {
			return "big"
		}
		return ""
	}}); err == nil || !strings.Contains(err.Error(), SettingMemoryMB) {
		t.Errorf("memory: %v", err)
	}
}

// TestConformance runs the providers' conformance suite against the fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		ID: ID,
		New: func(pt providertest.T, log *slog.Logger) providertest.Target {
			f := newFakeIncus(pt.(*testing.T))
			return providertest.Target{Provider: newTest(pt.(*testing.T), f, log), Faults: f, Exists: f.exists}
		},
	})
}
