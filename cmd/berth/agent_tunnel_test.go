package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAgentTunnelUsage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conn.json")
	for _, args := range [][]string{
		{"agent", "tunnel"},
		{"agent", "tunnel", "--connection-file", file, "--lifetime", "59"},
		{"agent", "tunnel", "--connection-file", file, "--lifetime", "86401"},
		{"agent", "tunnel", "--connection-file", file, "--port", "70000"},
		{"agent", "tunnel", "--connection-file", file, "extra"},
		{"agent", "tunnel", "--connection-file", file, "--egress", "docker0"},
		{"agent", "tunnel", "--connection-file", file, "--image", "gpu"},
		{"agent", "tunnel", "--connection-file", file, "--image", "desktop", "--turn-relay", "berth.example.com"},
	} {
		r := run(t, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "agent tunnel --help") {
			t.Errorf("berth %s: exit %d, stderr %q; want a usage error", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("a usage error left a connection file (stat: %v)", err)
	}
}

// TestAgentTunnelExistingFile refuses to overwrite a connection file, and
// takes --url as the named tunnel's URL, not the supervisor's.
func TestAgentTunnelExistingFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conn.json")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "agent", "tunnel", "--connection-file", file, "--url", "https://computer.example.com", "--port", "0")
	if r.code != exitFailure || !strings.Contains(r.stderr, "connection file already exists") {
		t.Errorf("exit %d, stderr %q; want a refusal naming the file", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("file = %q, want it untouched", b)
	}
}

func TestAgentTunnelURLFlagIsLocal(t *testing.T) {
	cmd, _, err := newRootCmd().Find([]string{"agent", "tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	f := cmd.Flags().Lookup("url")
	if f == nil || !strings.Contains(f.Usage, "named tunnel") {
		t.Errorf("--url of agent tunnel = %+v, want the named tunnel's URL", f)
	}
}
