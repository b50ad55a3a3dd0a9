package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/fake"
)

func TestProvidersList(t *testing.T) {
	t.Setenv("PROVIDERS", "docker,e2b,modal")
	t.Setenv("DEFAULT_PROVIDER", "docker")
	t.Setenv("E2B_API_URL", "https://e2b.example")
	t.Setenv("MODAL_IMAGE_HEADLESS", "")
	r := run(t, "", "providers")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"PROVIDER", "CONFIGURED",
		"\ne2b ", "yes",
		"no: set MODAL_IMAGE_HEADLESS",
		"no: not in PROVIDERS",
		"E2B_API_URL", "https://e2b.example",
		"E2B_TEMPLATE_HEADLESS", "berth-headless (default)",
		"MODAL_IMAGE_HEADLESS", "(unset, required)",
		"credentials (each connection):", "apiKey", "required, secret",
		"docker (DEFAULT_PROVIDER)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, id := range []string{"cloud", "daytona", "docker", "e2b", "local", "modal", "novita", "tunnel"} {
		if !strings.Contains(r.stdout, "\n"+id) {
			t.Errorf("provider %s not listed", id)
		}
	}
	// The fake provider, registered in this test binary by the tests that
	// run a real supervisor, is the one provider that describes nothing.
	if strings.Contains(strings.Replace(r.stdout, "\n"+fake.ID+"\n  describes no settings", "", 1), "describes no settings") {
		t.Errorf("a provider describes no settings:\n%s", r.stdout)
	}
}

// TestProvidersBuiltIn checks what the providers that run on this side
// show: docker's settings and no credentials, tunnel's credentials and no
// settings, and local's relay settings marked missing while unset.
func TestProvidersBuiltIn(t *testing.T) {
	t.Setenv("PROVIDERS", "docker,tunnel,local")
	t.Setenv("DEFAULT_PROVIDER", "docker")
	t.Setenv("WARM_POOL_SIZE", "3")
	t.Setenv("RELAY_URL", "")
	t.Setenv("RELAY_TOKEN", "")
	r := run(t, "", "providers", "docker", "tunnel", "local")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	docker, rest, _ := strings.Cut(r.stdout, "\ntunnel\n")
	tunnel, local, _ := strings.Cut(rest, "\nlocal\n")
	for _, c := range []struct {
		name, block string
		want        []string
	}{
		{"docker", docker, []string{"DOCKER_SOCKET", "unix:///var/run/docker.sock (default)", "COMPUTER_IMAGE_HEADLESS", "COMPUTER_MEMORY_MB", "COMPUTER_CPUS", "SANDBOX_RUNTIME", "COMPUTER_NETWORK_POOL", "WARM_POOL_SIZE 3 started", "credentials: none"}},
		{"tunnel", tunnel, []string{"settings: none", "url", "apiKey required, secret"}},
		{"local", local, []string{"RELAY_URL", "(unset, required)", "RELAY_TOKEN", "LOCAL_COMPUTER_CPUS", "lender optional"}},
	} {
		flat := strings.Join(strings.Fields(c.block), " ")
		for _, want := range c.want {
			if !strings.Contains(flat, want) {
				t.Errorf("%s lacks %q:\n%s", c.name, want, c.block)
			}
		}
	}
	if !strings.Contains(r.stdout, "no: set RELAY_URL, RELAY_TOKEN") {
		t.Errorf("local is not shown missing its relay:\n%s", r.stdout)
	}
}

func TestProvidersJSON(t *testing.T) {
	t.Setenv("PROVIDERS", "daytona")
	t.Setenv("DEFAULT_PROVIDER", "daytona")
	t.Setenv("DAYTONA_SNAPSHOT_HEADLESS", "snap-1")
	r := run(t, "", "providers", "daytona", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var vs []providerView
	if err := json.Unmarshal([]byte(r.stdout), &vs); err != nil || len(vs) != 1 {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	v := vs[0]
	if v.ID != "daytona" || !v.Enabled || !v.Default || !v.Configured {
		t.Errorf("view %+v", v)
	}
	found := false
	for _, s := range v.Settings {
		if s.Name == "DAYTONA_SNAPSHOT_HEADLESS" {
			found = s.Set && s.Value == "snap-1"
		}
	}
	if !found {
		t.Errorf("DAYTONA_SNAPSHOT_HEADLESS not shown as set: %+v", v.Settings)
	}
}

func TestProvidersUnknown(t *testing.T) {
	r := run(t, "", "providers", "nope")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown provider "nope"`) {
		t.Errorf("%+v", r)
	}
}

// TestProvidersRelayTurnsLocalOn checks that berth providers and berth
// supervisor agree: a RELAY_URL turns the local provider on without
// PROVIDERS naming it.
func TestProvidersRelayTurnsLocalOn(t *testing.T) {
	t.Setenv("PROVIDERS", "")
	t.Setenv("DEFAULT_PROVIDER", "docker")
	t.Setenv("RELAY_URL", "http://127.0.0.1:8081")
	t.Setenv("RELAY_TOKEN", "relay-secret-for-the-test")
	r := run(t, "", "--json", "providers", "local", "tunnel")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var views []providerView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if len(views) != 2 || !views[0].Enabled || !views[0].Configured || views[1].Enabled {
		t.Errorf("local and tunnel = %+v, want local configured and tunnel off", views)
	}
	if strings.Contains(r.stdout, "relay-secret-for-the-test") {
		t.Errorf("the relay token is printed: %s", r.stdout)
	}
	f := serverFlags{logLevel: "info"}
	o, err := f.options(newSupervisorCmd())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Providers, ",") != "docker,local" {
		t.Errorf("supervisor providers = %v, want docker,local", o.Providers)
	}
}

// TestProvidersRuntime checks that berth providers asks the engine which
// runtime docker computers run under, and says why.
func TestProvidersRuntime(t *testing.T) {
	testkit.RequireDocker(t)
	t.Setenv("PROVIDERS", "docker")
	t.Setenv("DEFAULT_PROVIDER", "docker")
	for _, c := range []struct{ setting, want string }{
		{"runc", "runtime: runc (set: SANDBOX_RUNTIME=runc)"},
		{"berth-no-such-runtime", `runtime: error: SANDBOX_RUNTIME="berth-no-such-runtime" is not a runtime the engine has (it has `},
		// runsc only while the engine lists it (make test-runsc).
		{"", "runtime: "},
	} {
		t.Setenv("SANDBOX_RUNTIME", c.setting)
		r := run(t, "", "providers", "docker")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "\n  "+c.want) {
			t.Errorf("SANDBOX_RUNTIME=%q: output lacks %q:\n%s", c.setting, c.want, r.stdout)
		}
		if c.setting == "" && !strings.Contains(r.stdout, "(detected: the engine lists runsc") && !strings.Contains(r.stdout, "(engine default: ") {
			t.Errorf("SANDBOX_RUNTIME unset: output says no reason for the runtime:\n%s", r.stdout)
		}
	}

	// Not enabled: the engine is not asked.
	t.Setenv("PROVIDERS", "e2b")
	t.Setenv("DEFAULT_PROVIDER", "e2b")
	r := run(t, "", "--json", "providers", "docker")
	var views []providerView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 1 {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if len(views[0].Found) != 0 {
		t.Errorf("docker not enabled, yet probed: %+v", views[0].Found)
	}
}
