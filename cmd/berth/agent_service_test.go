package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serviceEnv gives the test a temp HOME and a systemctl that stands in for
// a running systemd (PID 1 is not systemd where tests run): enable and
// disable are the real systemctl, which does them on the unit files alone;
// start and stop flip a state file that is-active reports.
func serviceEnv(t *testing.T) (home string) {
	t.Helper()
	real, err := exec.LookPath("systemctl")
	if err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("BERTH_REQUIRE_DOCKER") == "1" {
			t.Fatal("systemctl not found; apt-get install -y systemd")
		}
		t.Skip("systemctl not found; to run this test: apt-get install -y systemd")
	}
	home = t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(configDirEnv, "")
	bin := t.TempDir()
	state := filepath.Join(bin, "active")
	script := `#!/bin/sh
case "$1" in
enable|disable|list-unit-files) exec ` + real + ` "$@" ;;
daemon-reload) exit 0 ;;
start) touch ` + state + ` ;;
stop) rm -f ` + state + ` ;;
is-active) if [ -f ` + state + ` ]; then echo active; else echo inactive; exit 3; fi ;;
*) exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return home
}

func TestAgentServiceUser(t *testing.T) {
	home := serviceEnv(t)
	t.Chdir(home)
	u := []string{"--user", "--manager", "systemd"}
	svc := func(args ...string) result {
		return run(t, "", append(append([]string{"agent", "service"}, args...), u...)...)
	}
	svc("status").want(t, 0, "user service berth-agent (linux-systemd): not installed\n", "")

	r := run(t, "", append([]string{"agent", "service", "install", "--data", "lent"}, append(u, "--", "--log-level", "debug")...)...)
	unit := filepath.Join(home, ".config", "systemd", "user", "berth-agent.service")
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	data := filepath.Join(home, "lent")
	r.want(t, 0, "installed user service berth-agent (linux-systemd): "+unit+"\n"+
		"  runs: "+exe+" agent run --data "+data+" --log-level debug\n"+
		"start it now with: berth agent service start --user\n", "")
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if want := `ExecStart=` + exe + ` "agent" "run" "--data" "` + data + `" "--log-level" "debug"`; !strings.Contains(string(b), want+"\n") {
		t.Errorf("unit lacks %s:\n%s", want, b)
	}
	if strings.Contains(string(b), "HOME=") {
		t.Errorf("a user unit sets HOME:\n%s", b)
	}

	svc("install", "--name", "berth-agent-2").want(t, 0, "installed user service berth-agent-2 (linux-systemd): "+
		filepath.Join(home, ".config", "systemd", "user", "berth-agent-2.service")+"\n"+
		"  runs: "+exe+" agent run\n"+
		"start it now with: berth agent service start --user --name berth-agent-2\n", "")
	svc("uninstall", "--name", "berth-agent-2").want(t, 0, "uninstalled user service berth-agent-2 (linux-systemd)\n", "")
	svc("install").want(t, 1, "", "berth: service already installed; uninstall it first: "+unit+"\n")
	svc("status").want(t, 0, "user service berth-agent (linux-systemd): stopped\n", "")
	svc("start").want(t, 0, "started user service berth-agent (linux-systemd)\n", "")
	svc("status").want(t, 0, "user service berth-agent (linux-systemd): running\n", "")
	svc("stop").want(t, 0, "stopped user service berth-agent (linux-systemd)\n", "")
	svc("uninstall").want(t, 0, "uninstalled user service berth-agent (linux-systemd)\n", "")
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Errorf("unit left after uninstall: %v", err)
	}
	r = svc("start")
	if r.code != 1 || !strings.Contains(r.stderr, "service not installed: berth-agent (run: berth agent service install)") {
		t.Errorf("start after uninstall: %d %q", r.code, r.stderr)
	}
}

func TestAgentServiceUsage(t *testing.T) {
	serviceEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"install", "--user", "--manager", "systemd", "extra"}, `unexpected argument "extra": put flags for berth agent run after --`},
		{[]string{"install", "--user", "--manager", "sysv"}, "user services need systemd"},
		{[]string{"install", "--user", "--manager", "systemd", "--data", "/my data"}, `argument "/my data"`},
		{[]string{"status", "--name", "../x", "--user", "--manager", "systemd"}, `name "../x"`},
		{[]string{"status", "--manager", "launchd"}, `unknown service manager "launchd"`},
	} {
		r := run(t, "", append([]string{"agent", "service"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("berth agent service %s: exit %d, %q; want usage error %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}
