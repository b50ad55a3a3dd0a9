package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAppDepsNamesPackages runs `make app`'s check of the companion's cgo
// packages (packaging/dev/app-deps.sh) on a machine where one is missing
// and the user is not root: it fails and prints the exact apt-get line.
// With everything installed it passes silently.
func TestAppDepsNamesPackages(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("not a Debian machine: the check reads dpkg")
	}
	script, err := filepath.Abs("../packaging/dev/app-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	// A dpkg that knows every package but libxi-dev and libgl1-mesa-dev,
	// and an id that says the user is not root.
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("dpkg", `case "$2" in libxi-dev|libgl1-mesa-dev) exit 1;; esac; exit 0`+"\n")
	write("id", "echo 1000\n")
	run := func() ([]byte, error) {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		return cmd.CombinedOutput()
	}
	out, err := run()
	if err == nil {
		t.Fatalf("the check passed with packages missing:\n%s", out)
	}
	want := "sudo apt-get install -y --no-install-recommends libgl1-mesa-dev libxi-dev"
	if !strings.Contains(string(out), want) {
		t.Fatalf("the check printed:\n%s\nwant the line %q", out, want)
	}

	write("dpkg", "exit 0\n")
	if out, err := run(); err != nil || len(out) != 0 {
		t.Fatalf("with everything installed: %v\n%s", err, out)
	}
}
