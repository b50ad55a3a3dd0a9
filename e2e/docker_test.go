package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

type session struct {
	ID               string `json:"id"`
	State            string `json:"state"`
	Provider         string `json:"provider"`
	RemainingSeconds int    `json:"remainingSeconds"`
}

func connect(s *super, agent string) {
	s.t.Helper()
	s.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "docker", "leaseSeconds": 600, "dailySeconds": 3600}, 201, nil)
}

// TestDockerToolsAndHardening drives a real Docker computer through the five
// tools over REST and checks, from inside, every hardening property.
func TestDockerToolsAndHardening(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	s := startSupervisor(t, "berth/test:latest")
	connect(s, "hard")
	var sess session
	s.must("POST", "/v1/agents/hard/computer/start", nil, 200, &sess)
	if sess.State != "running" || sess.Provider != "docker" || sess.RemainingSeconds < 590 {
		t.Fatalf("start: %+v", sess)
	}
	t.Cleanup(func() { s.call("POST", "/v1/agents/hard/computer/stop", nil, nil) })
	name := "berth-c-" + strings.TrimPrefix(sess.ID, "s_")
	if out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", name).Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Fatalf("container %s not running: %s %v", name, out, err)
	}

	x := s.exec("hard", "uname -a; id -u; id -g")
	lines := strings.Split(strings.TrimSpace(x.Stdout), "\n")
	if x.ExitCode != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "Linux") || lines[1] != "1000" || lines[2] != "1000" {
		t.Fatalf("uname/id: %+v", x)
	}

	checks := []struct {
		name, cmd, want string
	}{
		{"capabilities", "grep CapEff /proc/self/status", "0000000000000000"},
		{"no new privileges", "grep NoNewPrivs /proc/self/status", "1"},
		{"root read-only", "touch /x 2>&1; echo rc=$?", "rc=1"},
		{"etc read-only", "echo x >> /etc/passwd 2>&1; echo rc=$?", "rc=1"},
		{"tmp writable", "echo ok > /tmp/probe && cat /tmp/probe", "ok"},
		{"tmp is 1 GB tmpfs", "grep ' /tmp ' /proc/mounts", "size=1048576k"},
		{"home writable", "echo ok > $HOME/probe && cat $HOME/probe", "ok"},
		{"shm 512 MB", "grep ' /dev/shm ' /proc/mounts", "size=524288k"},
		{"memory limit", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max", strconv.Itoa(512 << 20)},
		{"swap capped", "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes 2>/dev/null || echo $(( $(cat /sys/fs/cgroup/memory.swap.max) + $(cat /sys/fs/cgroup/memory.max) ))", strconv.Itoa(512 << 20)},
		{"pids limit", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max", "512"},
		{"no token in env", "env | grep -c BERTH_TOKEN || true", "0"},
	}
	for _, c := range checks {
		x := s.exec("hard", c.cmd)
		if !strings.Contains(x.Stdout, c.want) {
			t.Errorf("%s: `%s` gave %q (stderr %q), want it to contain %q", c.name, c.cmd, x.Stdout, x.Stderr, c.want)
		}
	}

	// Files round trip through the tools.
	var w struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	}
	s.must("POST", "/v1/agents/hard/computer/write_file", map[string]any{"path": "dir/hello.txt", "content": "grüße\n"}, 200, &w)
	if w.Bytes != int64(len("grüße\n")) {
		t.Fatalf("write: %+v", w)
	}
	var r struct {
		Content   string `json:"content"`
		Truncated bool   `json:"truncated"`
	}
	s.must("POST", "/v1/agents/hard/computer/read_file", map[string]any{"path": "dir/hello.txt"}, 200, &r)
	if r.Content != "grüße\n" || r.Truncated {
		t.Fatalf("read: %+v", r)
	}
	if x := s.exec("hard", "sha256sum /home/berth/dir/hello.txt"); !strings.HasPrefix(x.Stdout, w.SHA256) {
		t.Fatalf("sha256 inside %q, tool said %s", x.Stdout, w.SHA256)
	}

	// The pids limit holds: of 600 background sleeps, only as many start as
	// the limit leaves room for (the shells count too). Last, since the
	// computer has no processes to spare afterwards.
	x = s.exec("hard", `mkfifo /tmp/f; ( i=0; while [ $i -lt 600 ]; do sleep 30 >/dev/null 2>&1 & i=$((i+1)); echo $i > /tmp/count; done ) >/dev/null 2>&1; read -t 3 x <> /tmp/f; read n < /tmp/count; echo started=$n`)
	if n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(x.Stdout), "started=")); n < 400 || n >= 512 {
		t.Errorf("pids: %d sleeps started, want fewer than 512 (stdout %q, stderr %q)", n, x.Stdout, x.Stderr)
	}

	s.must("POST", "/v1/agents/hard/computer/stop", nil, 200, &sess)
	if sess.State != "stopped" {
		t.Fatalf("stop: %+v", sess)
	}
	if left := managed(t, sess.ID); left != "" {
		t.Fatalf("left behind after stop: %s", left)
	}
}

// TestHeadlessImage checks that the real headless image works under the
// same hardening: its tools run as uid 1000 on a read-only root.
func TestHeadlessImage(t *testing.T) {
	requireDocker(t, "berth/headless:latest")
	light(t)
	s := startSupervisor(t, "berth/headless:latest")
	connect(s, "headless")
	var sess session
	s.must("POST", "/v1/agents/headless/computer/start", nil, 200, &sess)
	t.Cleanup(func() { s.call("POST", "/v1/agents/headless/computer/stop", nil, nil) })
	x := s.exec("headless", "set -e; git --version; python3 --version; node --version; npm --version; chromium --version; agent-browser --help >/dev/null && echo agent-browser ok")
	for _, want := range []string{"git version", "Python 3", "v", "Chromium", "agent-browser ok"} {
		if !strings.Contains(x.Stdout, want) {
			t.Errorf("headless tools: missing %q in %q (stderr %q)", want, x.Stdout, x.Stderr)
		}
	}
	x = s.exec("headless", "chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --user-data-dir=/tmp/chr --dump-dom 'data:text/html,<p id=x>rendered</p>' 2>/dev/null")
	if !strings.Contains(x.Stdout, "rendered") {
		t.Errorf("chromium did not render a page: %+v", x)
	}
	s.must("POST", "/v1/agents/headless/computer/stop", nil, 200, &sess)
	if left := managed(t, sess.ID); left != "" {
		t.Fatalf("left behind after stop: %s", left)
	}
}
