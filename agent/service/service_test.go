package service

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/internal/testkit"
)

// nsEnv marks the child process that runs a test inside its own mount
// namespace, where the system's service directories are temp dirs.
const nsEnv = "BERTH_SERVICE_TEST_NAMESPACE"

// required reports whether tests must fail instead of skipping when a tool
// or privilege is missing: in CI, and whenever Docker tests are required.
func required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("BERTH_REQUIRE_DOCKER") == "1"
}

func need(t *testing.T, why, fix string) {
	t.Helper()
	if required() {
		t.Fatalf("%s (CI=true or BERTH_REQUIRE_DOCKER=1 makes this a failure); fix: %s", why, fix)
	}
	t.Skipf("%s; to run this test: %s", why, fix)
}

func testCtx(t *testing.T) context.Context {
	deadline := time.Now().Add(60 * time.Second)
	if d, ok := t.Deadline(); ok && d.Add(-time.Second).Before(deadline) {
		deadline = d.Add(-time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// standInSystemctl puts a systemctl first on PATH that stands in for a
// running systemd (PID 1 is not systemd on the machines tests run on):
// enable, disable and list-unit-files are the real systemctl, which does
// them on the unit files alone; daemon-reload succeeds; start and stop
// flip a state file that is-active reports. Every call is logged.
func standInSystemctl(t *testing.T) (log string) {
	t.Helper()
	real, err := exec.LookPath("systemctl")
	if err != nil {
		need(t, "systemctl not found", "apt-get install -y systemd")
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$*" >> ` + log + `
state=` + filepath.Join(dir, "active") + `
case "$1" in
enable|disable|list-unit-files) exec ` + real + ` "$@" ;;
daemon-reload) exit 0 ;;
start) touch "$state" ;;
stop) rm -f "$state" ;;
is-active) if [ -f "$state" ]; then echo active; else echo inactive; exit 3; fi ;;
*) echo "stand-in systemctl: unexpected $*" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

// verifyUnit runs systemd-analyze verify on a unit file and returns what
// it objected to: its output (it warns on stderr about unknown keys and
// still exits 0) or its failure.
func verifyUnit(t *testing.T, path string, user bool) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		need(t, "systemd-analyze not found", "apt-get install -y systemd")
	}
	args := []string{"verify", path}
	if user {
		args = append([]string{"--user"}, args...)
	}
	cmd := exec.CommandContext(testCtx(t), analyze, args...)
	if user {
		rt := t.TempDir()
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out) + "\n" + err.Error())
	}
	return strings.TrimSpace(string(out))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustStatus(t *testing.T, s *Service, want Status) {
	t.Helper()
	got, err := s.Status()
	if err != nil || got != want {
		t.Fatalf("status = %q, %v; want %q", got, err, want)
	}
}

// The checker itself must catch a wrong unit, or the tests below prove
// nothing.
func TestVerifyUnitCatchesMistakes(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	for name, unit := range map[string]string{
		"unknown key": "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\nRestartSecs=10\n[Install]\nWantedBy=default.target\n",
		"missing exe": "[Unit]\nDescription=x\n[Service]\nExecStart=/nonexistent/berth agent run\n[Install]\nWantedBy=default.target\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".service")
		if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := verifyUnit(t, p, true); got == "" {
			t.Errorf("%s: systemd-analyze verify found nothing wrong", name)
		}
	}
}

func userService(t *testing.T, args []string, env ...string) (*Service, string) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{}
	for i := 0; i+1 < len(env); i += 2 {
		envs[env[i]] = env[i+1]
	}
	s, err := New(Config{Name: "berth-agent-test", User: true, Executable: exe, Args: args, Env: envs, Manager: Systemd})
	if err != nil {
		t.Fatal(err)
	}
	return s, home
}

// The user unit, made by kardianos/service's systemd flavour in a temp
// HOME, passes systemd-analyze verify, and install, start, stop and
// uninstall drive systemctl --user.
func TestSystemdUserService(t *testing.T) {
	calls := standInSystemctl(t)
	s, home := userService(t, []string{"agent", "run", "--data", "/srv/berth"}, "BERTH_CONFIG_DIR", "/srv/berth-config")
	unit := filepath.Join(home, ".config", "systemd", "user", "berth-agent-test.service")
	if s.Path() != unit {
		t.Fatalf("Path() = %s, want %s", s.Path(), unit)
	}
	mustStatus(t, s, StatusNotInstalled)
	if err := s.Start(); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("start before install: %v", err)
	}
	if err := s.Install(); err != nil {
		t.Fatal(err)
	}
	text := readFile(t, unit)
	t.Logf("%s:\n%s", unit, text)
	exe, _ := os.Executable()
	for _, want := range []string{
		"ExecStart=" + exe + ` "agent" "run" "--data" "/srv/berth"` + "\n",
		"Restart=always\n",
		"Environment=BERTH_CONFIG_DIR=/srv/berth-config\n",
		"WantedBy=default.target\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if strings.Contains(text, "multi-user.target") || strings.Contains(text, "docker.service") {
		t.Errorf("a user unit names system targets:\n%s", text)
	}
	if got := verifyUnit(t, unit, true); got != "" {
		t.Errorf("systemd-analyze verify:\n%s", got)
	}
	link := filepath.Join(home, ".config", "systemd", "user", "default.target.wants", "berth-agent-test.service")
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("not enabled: %v", err)
	}
	if err := s.Install(); !errors.Is(err, ErrInstalled) {
		t.Errorf("second install: %v", err)
	}

	mustStatus(t, s, StatusStopped)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, s, StatusRunning)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, s, StatusStopped)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Uninstall(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{unit, link} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after uninstall: %v", p, err)
		}
	}
	mustStatus(t, s, StatusNotInstalled)
	if err := s.Uninstall(); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("second uninstall: %v", err)
	}

	log := readFile(t, calls)
	want := []string{
		"enable --user berth-agent-test.service",
		"daemon-reload --user",
		"start --user berth-agent-test.service",
		"stop --user berth-agent-test.service",
		"disable --user berth-agent-test.service",
	}
	for _, w := range want {
		if !strings.Contains(log, w+"\n") {
			t.Errorf("systemctl never called with %q; calls:\n%s", w, log)
		}
	}
	// Uninstall stopped the running service before disabling it.
	if i, j := strings.LastIndex(log, "stop --user"), strings.Index(log, "disable --user"); i < 0 || i > j {
		t.Errorf("uninstall did not stop first; calls:\n%s", log)
	}
}

// A failed install leaves nothing behind.
func TestSystemdInstallFailureLeavesNothing(t *testing.T) {
	standInSystemctl(t)
	s, home := userService(t, nil)
	// The user unit directory is a file: the unit cannot be written.
	cfg := filepath.Join(home, ".config", "systemd")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "user"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Install(); err == nil {
		t.Fatal("install succeeded")
	}

	// systemctl enable fails after the unit was written.
	s, _ = userService(t, nil)
	dir := t.TempDir()
	script := "#!/bin/sh\ncase \"$1\" in enable) echo 'Failed to enable unit' >&2; exit 1;; esac\nexit 0\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	err := s.Install()
	if err == nil || !strings.Contains(err.Error(), "install user service berth-agent-test") {
		t.Fatalf("install: %v", err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit left after a failed install: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "-x", Executable: "/bin/true"}, `name "-x"`},
		{Config{Name: "a/b", Executable: "/bin/true"}, `name "a/b"`},
		{Config{Name: strings.Repeat("a", 65), Executable: "/bin/true"}, "longer than 64"},
		{Config{Executable: "berth"}, "not an absolute path"},
		{Config{Executable: "/bin/true", Args: []string{"agent", "run", "--data", "/my data"}}, `argument "/my data"`},
		{Config{Executable: "/bin/true", Args: []string{"$(reboot)"}}, `argument "$(reboot)"`},
		{Config{Executable: "/bin/true", Args: []string{""}}, "empty"},
		{Config{Executable: "/bin/true", Manager: "nope"}, `unknown service manager "nope"`},
		{Config{Executable: "/bin/true", Env: map[string]string{"1X": "a"}}, `variable name "1X"`},
		{Config{Executable: "/bin/true", Env: map[string]string{"HOME": "/home/a b"}}, `HOME: invalid service config: argument "/home/a b"`},
	} {
		_, err := New(c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v; want an ErrConfig naming %s", c.cfg, err, c.want)
		}
	}
	_, err := New(Config{Executable: "/bin/true", User: true, Manager: SysV})
	if !errors.Is(err, ErrNoUserServices) {
		t.Errorf("user service on SysV: %v", err)
	}
	s, err := New(Config{Executable: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != DefaultName || strings.Join(s.Command(), " ") != "/bin/true agent run" {
		t.Errorf("defaults: %s %q", s.Name(), s.Command())
	}
}

// inNamespace runs the test named name again in a child process with its
// own mount namespace, and reports the child's outcome. It returns true in
// the child, which goes on to run the test body.
func inNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(nsEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		need(t, "installing a system service needs root", "run the tests as root")
	}
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), nsEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in a mount namespace:\n%s", out)
	if err != nil {
		if bytes.Contains(out, []byte("--- FAIL")) || bytes.Contains(out, []byte("--- SKIP")) {
			t.Fatalf("child test: %v", err)
		}
		need(t, "cannot run a test in a mount namespace: "+err.Error(), "run the tests as root where unshare(CLONE_NEWNS) is allowed")
	}
	if bytes.Contains(out, []byte("--- SKIP")) {
		t.Fatal("the child test skipped")
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatal("the child test did not pass")
	}
	return false
}

// overlay mounts a fresh temp dir over each of dirs, in this process's own
// mount namespace.
func overlay(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		src := t.TempDir()
		if err := syscall.Mount(src, d, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s over %s: %v", src, d, err)
		}
	}
}

// The system unit, installed with the systemd flavour into a temp
// /etc/systemd/system, passes systemd-analyze verify, is enabled for
// multi-user.target, and uninstall removes it.
func TestSystemdSystemService(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	overlay(t, "/etc/systemd/system")
	calls := standInSystemctl(t)
	exe, _ := os.Executable()
	s, err := New(Config{Name: "berth-agent-test", Executable: exe, Args: []string{"agent", "run", "--data", "/var/lib/berth-agent"}, Manager: Systemd})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(); err != nil {
		t.Fatal(err)
	}
	unit := "/etc/systemd/system/berth-agent-test.service"
	text := readFile(t, unit)
	t.Logf("%s:\n%s", unit, text)
	for _, want := range []string{
		"ExecStart=" + exe + ` "agent" "run" "--data" "/var/lib/berth-agent"` + "\n",
		"After=network-online.target docker.service\n",
		"WantedBy=multi-user.target\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if got := verifyUnit(t, unit, false); got != "" {
		t.Errorf("systemd-analyze verify:\n%s", got)
	}
	link := "/etc/systemd/system/multi-user.target.wants/berth-agent-test.service"
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("not enabled: %v", err)
	}
	mustStatus(t, s, StatusStopped)
	if err := s.Uninstall(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{unit, link} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after uninstall: %v", p, err)
		}
	}
	if log := readFile(t, calls); !strings.Contains(log, "enable berth-agent-test.service\n") || !strings.Contains(log, "disable berth-agent-test.service\n") {
		t.Errorf("systemctl calls:\n%s", log)
	}
}

// The SysV flavour, which this machine's kardianos/service picks, with temp
// /etc/init.d, /etc/rc?.d, /run and /var/log: the init script is written
// and linked into the run levels, starts and stops the real program, and
// uninstall removes it all.
func TestSysVService(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	overlay(t, "/etc/init.d", "/etc/rc0.d", "/etc/rc1.d", "/etc/rc2.d", "/etc/rc3.d", "/etc/rc4.d", "/etc/rc5.d", "/etc/rc6.d", "/run", "/var/log")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Name: "berth-agent-test", Executable: sleep, Args: []string{"55"}, Env: map[string]string{"HOME": "/root"}, Manager: SysV})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, s, StatusNotInstalled)
	if err := s.Install(); err != nil {
		t.Fatal(err)
	}
	script := "/etc/init.d/berth-agent-test"
	fi, err := os.Stat(script)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("init script: %v, %v", fi, err)
	}
	text := readFile(t, script)
	if !strings.Contains(text, `cmd="`+sleep+` "55""`) {
		t.Errorf("init script does not run %s 55:\n%s", sleep, text)
	}
	if !strings.Contains(text, "\nexport HOME=/root\n") {
		t.Errorf("init script does not set HOME:\n%s", text)
	}
	if out, err := exec.Command("sh", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("sh -n %s: %v\n%s", script, err, out)
	}
	for _, l := range []string{"/etc/rc2.d/S50berth-agent-test", "/etc/rc5.d/S50berth-agent-test", "/etc/rc0.d/K02berth-agent-test", "/etc/rc6.d/K02berth-agent-test"} {
		if target, err := os.Readlink(l); err != nil || target != script {
			t.Errorf("%s -> %q, %v", l, target, err)
		}
	}
	if err := s.Install(); !errors.Is(err, ErrInstalled) {
		t.Errorf("second install: %v", err)
	}

	// The init script starts the program in the background and exits; as a
	// child subreaper this process adopts the program and reaps it when it
	// is stopped, so that no zombie keeps the script's stop loop waiting,
	// whatever PID 1 does.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, s, StatusStopped)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	pid := func() int {
		b, err := os.ReadFile("/run/berth-agent-test.pid")
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	p := pid()
	reapWhenAdopted(p)
	t.Cleanup(func() {
		if p > 0 {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	// The pid file names the script's background child as it forks; it
	// runs the program a moment later, once it has exec'd.
	var cmdline []byte
	testkit.Poll(5*time.Second, func() bool {
		cmdline, err = os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		return err == nil && string(cmdline) == sleep+"\x0055\x00"
	})
	if err != nil || string(cmdline) != sleep+"\x0055\x00" {
		t.Fatalf("pid %d runs %q, %v", p, cmdline, err)
	}
	mustStatus(t, s, StatusRunning)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, s, StatusStopped)

	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	p = pid()
	reapWhenAdopted(p)
	if err := s.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
		// The stopped process may linger as a zombie of the init script's
		// shell until it is reaped; it must at least not be running.
		if st, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat"); !bytes.Contains(st, []byte(") Z")) {
			t.Errorf("pid %d still runs after uninstall", p)
		}
	}
	links, _ := filepath.Glob("/etc/rc?.d/*berth-agent-test")
	if _, err := os.Stat(script); !errors.Is(err, os.ErrNotExist) || len(links) > 0 {
		t.Errorf("left after uninstall: script %v, links %q", err, links)
	}
	mustStatus(t, s, StatusNotInstalled)
}

// reapWhenAdopted waits for pid in the background once it has become this
// process's child, for at most 30 s.
func reapWhenAdopted(pid int) {
	go func() {
		for range 3000 {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != syscall.ECHILD {
				return
			}
			time.Sleep(10 * time.Millisecond) // not adopted yet
		}
	}()
}
