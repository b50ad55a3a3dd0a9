package main

import (
	"encoding/json"
	"strings"
	"testing"
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
	for _, id := range []string{"cloud", "daytona", "docker", "e2b", "modal", "novita", "tunnel"} {
		if !strings.Contains(r.stdout, "\n"+id) {
			t.Errorf("provider %s not listed", id)
		}
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
