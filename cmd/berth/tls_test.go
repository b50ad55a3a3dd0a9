package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerTLSFlags: --tls-cert and --tls-key go together, and a file
// that does not load stops the command at start, named.
func TestServerTLSFlags(t *testing.T) {
	for _, cmd := range []string{"supervisor", "dev"} {
		dir := t.TempDir()
		cert := filepath.Join(dir, "cert.pem")
		if err := os.WriteFile(cert, []byte("not used"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := run(t, "", cmd, "--data", dir, "--tls-cert", cert); r.code != exitUsage || !strings.Contains(r.stderr, "--tls-key") {
			t.Errorf("berth %s --tls-cert alone: exit %d %q, want %d naming --tls-key", cmd, r.code, r.stderr, exitUsage)
		}
		if r := run(t, "", cmd, "--data", dir, "--tls-key", cert); r.code != exitUsage || !strings.Contains(r.stderr, "--tls-cert") {
			t.Errorf("berth %s --tls-key alone: exit %d %q, want %d naming --tls-cert", cmd, r.code, r.stderr, exitUsage)
		}
	}
	dir := t.TempDir()
	cert, missing := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "missing.key")
	if err := os.WriteFile(cert, []byte("not used"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "supervisor", "--data", dir, "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", missing)
	if r.code != exitFailure || !strings.Contains(r.stderr, missing) {
		t.Errorf("berth supervisor with a missing key: exit %d %q, want %d naming %s", r.code, r.stderr, exitFailure, missing)
	}
}
