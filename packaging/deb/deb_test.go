package deb

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

const baseImage = "berth/debian-base:bookworm"

var units = []string{
	"system/berth-supervisor.service",
	"system/berth-relay.service",
	"system/berth-agent.service",
	"user/berth-agent.service",
}

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, ctx context.Context, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// buildDebs builds berth once (stamped v0.0.1) and packages it twice, as
// 0.0.1 and 0.0.2, into dir.
func buildDebs(t *testing.T, ctx context.Context, dir string) (first, second string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	arch := runtime.GOARCH
	t0 := time.Now()
	run(t, ctx, []string{"VERSION=v0.0.1", "DIST=" + dir}, filepath.Join(root, "packaging/dist/build.sh"), "linux/"+arch)
	bin := filepath.Join(dir, "berth-linux-"+arch)
	for i, v := range []string{"v0.0.1", "v0.0.2"} {
		out := strings.TrimSpace(run(t, ctx, []string{"VERSION=" + v, "DIST=" + dir, "BERTH_BIN=" + bin},
			filepath.Join(root, "packaging/deb/build.sh"), arch))
		path := out[strings.LastIndex(out, "\n")+1:]
		if want := "berth_" + v[1:] + "_" + arch + ".deb"; filepath.Base(path) != want {
			t.Fatalf("build.sh made %q, want %s", path, want)
		}
		if i == 0 {
			first = path
		} else {
			second = path
		}
	}
	t.Logf("berth built and packaged twice in %v", time.Since(t0).Round(time.Millisecond))
	return first, second
}

// TestPackage installs the package in a clean Debian container (no
// network), upgrades it, removes and purges it, checking what each step
// leaves behind; and verifies every unit with systemd-analyze.
func TestPackage(t *testing.T) {
	testkit.RequireDocker(t, baseImage)
	testkit.RequireTools(t, "apt-get install -y systemd", "systemd-analyze", "dpkg-deb")
	ctx := testkit.ContextTimeout(t, 4*time.Minute)
	dir := t.TempDir()
	first, second := buildDebs(t, ctx, dir)

	t.Run("units", func(t *testing.T) { verifyUnits(t, ctx, first) })

	name := fmt.Sprintf("berth-deb-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	run(t, ctx, nil, "docker", "run", "-d", "--name", name, "--network", "none",
		"-v", dir+":/pkgs:ro", baseImage, "sleep", "infinity")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	sh := func(script string) string {
		t.Helper()
		return run(t, ctx, nil, "docker", "exec", name, "sh", "-ec", script)
	}
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("want %q in:\n%s", w, out)
			}
		}
	}

	// A fresh install: the user, the folders, the configuration, the units.
	out := sh("dpkg -i /pkgs/" + filepath.Base(first))
	expect(out, "berth: created the system user berth", "berth: created /var/lib/berth/supervisor", "berth: installed.")
	expect(sh("berth version"), "berth v0.0.1 ")
	expect(sh("getent passwd berth"), ":/var/lib/berth:/usr/sbin/nologin")
	expect(sh("stat -c '%n %U:%G %a' /var/lib/berth /var/lib/berth/supervisor /var/lib/berth/relay /var/lib/berth/agent /etc/berth/supervisor.env /etc/berth/relay.env /etc/berth/agent.env"),
		"/var/lib/berth berth:berth 750", "/var/lib/berth/agent berth:berth 750",
		"/etc/berth/supervisor.env root:berth 640", "/etc/berth/agent.env root:berth 640")
	for _, u := range units {
		sh("test -f /usr/lib/systemd/" + u)
	}
	expect(sh("dpkg-query -W -f '${Conffiles}' berth"), "/etc/berth/supervisor.env", "/etc/berth/relay.env", "/etc/berth/agent.env")
	if got := sh("grep -v '^#' /etc/berth/supervisor.env | grep -v '^$' || true"); strings.TrimSpace(got) != "" {
		t.Errorf("supervisor.env sets something by default:\n%s", got)
	}

	// An upgrade keeps the data and an edited configuration.
	sh("echo state > /var/lib/berth/supervisor/keep && echo BERTH_LISTEN=0.0.0.0:9000 >> /etc/berth/supervisor.env")
	out = sh("dpkg -i /pkgs/" + filepath.Base(second))
	expect(out, "berth: upgraded from 0.0.1; data in /var/lib/berth kept")
	if strings.Contains(out, "created the system user") {
		t.Errorf("the upgrade made the user again:\n%s", out)
	}
	expect(sh("dpkg-query -W -f '${Version}' berth"), "0.0.2")
	expect(sh("cat /var/lib/berth/supervisor/keep; tail -n1 /etc/berth/supervisor.env"), "state\nBERTH_LISTEN=0.0.0.0:9000")

	// Enabled as systemctl enable would, then removed: the data, the
	// configuration and the user stay; the units go.
	sh("mkdir -p /etc/systemd/system/multi-user.target.wants && ln -s /usr/lib/systemd/system/berth-supervisor.service /etc/systemd/system/multi-user.target.wants/")
	expect(sh("dpkg -r berth"), "berth: removed; kept /var/lib/berth")
	expect(sh("cat /var/lib/berth/supervisor/keep; getent passwd berth; ls /etc/berth"), "state", "berth:", "supervisor.env")
	expect(sh("ls /usr/lib/systemd/system /usr/lib/systemd/user 2>/dev/null | grep -c berth || true"), "0")
	sh("test ! -e /usr/bin/berth")

	// A purge leaves nothing: no unit or unit link, no data, no user.
	out = sh("dpkg --purge berth")
	expect(out, "berth: removed /var/lib/berth (data)", "berth: removed the system user berth", "multi-user.target.wants/berth-supervisor.service")
	left := sh("find / -xdev \\( -path /proc -o -path /sys -o -path /pkgs \\) -prune -o -name 'berth*' -print; getent passwd berth || true; getent group berth || true")
	if strings.TrimSpace(left) != "" {
		t.Errorf("left after the purge:\n%s", left)
	}
}

// verifyUnits runs systemd-analyze verify on each unit of the package,
// unpacked into a folder with this machine's systemd units beside them,
// so that /usr/bin/berth and the targets they name exist. The user unit
// (systemd-analyze --user takes no --root) is checked as a copy naming the
// unpacked binary. Any output (an unknown key, a bad value) fails.
func verifyUnits(t *testing.T, ctx context.Context, deb string) {
	root := t.TempDir()
	run(t, ctx, nil, "dpkg-deb", "-x", deb, root)
	for _, d := range []string{"system", "user"} {
		run(t, ctx, nil, "cp", "-rn", "/usr/lib/systemd/"+d+"/.", filepath.Join(root, "usr/lib/systemd", d))
	}
	for _, u := range units {
		var cmd *exec.Cmd
		if strings.HasPrefix(u, "user/") {
			text, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd", u))
			if err != nil {
				t.Fatal(err)
			}
			home := t.TempDir()
			p := filepath.Join(home, filepath.Base(u))
			text = bytes.ReplaceAll(text, []byte("/usr/bin/berth"), []byte(filepath.Join(root, "usr/bin/berth")))
			if err := os.WriteFile(p, text, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd = exec.CommandContext(ctx, "systemd-analyze", "--user", "verify", p)
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+t.TempDir())
		} else {
			cmd = exec.CommandContext(ctx, "systemd-analyze", "verify", "--root="+root, "/usr/lib/systemd/"+u)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
}
