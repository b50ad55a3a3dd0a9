package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// TestAppDepsNamesPackages runs `make app`'s check of the companion's cgo
// packages (packaging/dev/app-deps.sh) on a machine where one is missing
// and the user is not root: it fails and prints the exact apt-get line.
// With everything installed it passes silently.
func TestAppDepsNamesPackages(t *testing.T) {
	light(t)
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

// TestAppDepsCleanDebian runs the same check in a clean Debian container
// (the images' base, no network), with its real dpkg: as a user it names
// every one of the packages; as root it installs exactly those with
// apt-get (a recording apt-get stands in: there is no network), and when
// apt-get fails it says so and names them again.
func TestAppDepsCleanDebian(t *testing.T) {
	light(t)
	const base = "berth/debian-base:bookworm"
	testkit.RequireDocker(t, base)
	ctx := testkit.ContextTimeout(t, 2*time.Minute)
	script, err := filepath.Abs("../packaging/dev/app-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	const pkgs = "gcc libc6-dev pkg-config libgl1-mesa-dev libx11-dev libxcursor-dev libxrandr-dev libxinerama-dev libxi-dev libxxf86vm-dev"
	docker := func(wantOK bool, user, sh string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", "--user", user,
			"-v", script+":/app-deps.sh:ro", base, "bash", "-c", sh)
		out, err := cmd.CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("docker run (as %s) %q: %v\n%s", user, sh, err, out)
		}
		return string(out)
	}

	out := docker(false, "1000:1000", "bash /app-deps.sh")
	if want := "sudo apt-get install -y --no-install-recommends " + pkgs + "\n"; !strings.Contains(out, want) {
		t.Errorf("as a user the check printed:\n%s\nwant the line %q", out, want)
	}

	fake := `mkdir -p /tmp/bin && printf '#!/bin/sh\necho "apt-get $*" >>/tmp/apt.log\n[ "$1" != install ] || [ -z "$FAIL" ]\n' >/tmp/bin/apt-get && chmod +x /tmp/bin/apt-get && export PATH=/tmp/bin:$PATH; `
	out = docker(true, "0:0", fake+"bash /app-deps.sh 2>&1 && cat /tmp/apt.log")
	if want := "apt-get update -qq\napt-get install -y -qq --no-install-recommends " + pkgs + "\n"; !strings.Contains(out, want) {
		t.Errorf("as root the check ran:\n%s\nwant %q", out, want)
	}
	out = docker(false, "0:0", fake+"FAIL=1 bash /app-deps.sh")
	if want := "install them with:\n          apt-get install -y --no-install-recommends " + pkgs + "\n"; !strings.Contains(out, want) {
		t.Errorf("with apt-get failing the check printed:\n%s\nwant %q", out, want)
	}
}
