package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestShellDocker opens `berth computer shell` on a real Docker computer
// of the headless image: the login shell runs on a terminal of the size
// asked for, and the exit code comes through; a stop ends an open one.
func TestShellDocker(t *testing.T) {
	requireDocker(t, "berth/headless:latest")
	light(t)
	s := startSupervisor(t, "berth/headless:latest")
	s.must("POST", "/v1/agents", map[string]any{"id": "sh", "name": "shell"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "sh", "provider": "docker"}, 201, nil)
	s.must("POST", "/v1/agents/sh/computer/start", nil, 200, nil)
	t.Cleanup(func() { s.call("POST", "/v1/agents/sh/computer/stop", nil, nil) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, "computer", "shell", "--agent", "sh")
	cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
	cmd.Stdin = strings.NewReader("echo shell=$0 user=$(id -un) tty=$(tty); stty size; echo hi-$((1+2)); exit 6\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	t.Logf("berth computer shell: %v\nstdout: %q\nstderr: %q", err, out.String(), errb.String())
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 6 {
		t.Fatalf("exit: %v, want 6", err)
	}
	for _, want := range []string{"shell=/bin/bash", "user=berth", "tty=/dev/pts/", "24 80", "hi-3", "logout"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not show %q", want)
		}
	}

	// A terminal left open ends when the session stops.
	cmd = exec.CommandContext(ctx, berthBin, "computer", "shell", "--agent", "sh", "--", "sleep 600")
	cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
	errb.Reset()
	cmd.Stderr = &errb
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	s.must("POST", "/v1/agents/sh/computer/stop", nil, 200, nil)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 255 || !strings.Contains(errb.String(), "session_ended") {
		t.Fatalf("after stop: %v, stderr %q; want 255 and session_ended", err, errb.String())
	}
}
