package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCLI runs the README's example with the berth CLI against a supervisor
// with the docker provider.
func TestCLI(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	s := startSupervisor(t, "berth/test:latest")
	run := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, berthBin, args...)
		cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("berth %v: %v", args, err)
		}
		t.Logf("berth %s -> %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		return out.String(), errb.String(), code
	}
	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		out, errs, code := run(stdin, args...)
		if code != 0 {
			t.Fatalf("berth %v exited %d: %s", args, code, errs)
		}
		return out
	}
	mustRun("", "agent", "create", "CLI agent", "--id", "cli")
	mustRun("", "computer", "connect", "--agent", "cli", "--provider", "docker")
	mustRun("", "computer", "start", "--agent", "cli")
	t.Cleanup(func() { run("", "computer", "stop", "--agent", "cli") })
	if out := mustRun("", "computer", "exec", "--agent", "cli", "--", "uname", "-a"); !strings.HasPrefix(out, "Linux") {
		t.Fatalf("uname: %q", out)
	}
	if _, _, code := run("", "computer", "exec", "--agent", "cli", "--", "exit 7"); code != 7 {
		t.Fatalf("exec exit code %d, want 7", code)
	}
	mustRun("hello from the cli\n", "computer", "write", "--agent", "cli", "notes.txt")
	if out := mustRun("", "computer", "read", "--agent", "cli", "notes.txt"); out != "hello from the cli\n" {
		t.Fatalf("read: %q", out)
	}
	if out := mustRun("", "computer", "status", "--agent", "cli"); !strings.Contains(out, "running") {
		t.Fatalf("status: %q", out)
	}
	if out := mustRun("", "computer", "ls"); !strings.Contains(out, "cli") || !strings.Contains(out, "running") {
		t.Fatalf("ls: %q", out)
	}
	mustRun("", "computer", "stop", "--agent", "cli")
	if _, errs, code := run("", "computer", "exec", "--agent", "cli", "--", "true"); code == 0 || !strings.Contains(errs, "no_session") {
		t.Fatalf("exec after stop: code %d stderr %q", code, errs)
	}
	if _, errs, code := run("", "computer", "connect", "--agent", "cli", "--provider", "docker"); code == 0 || !strings.Contains(errs, "conflict") {
		t.Fatalf("second connect: code %d stderr %q", code, errs)
	}
	mustRun("", "computer", "disconnect", "--agent", "cli")
}
