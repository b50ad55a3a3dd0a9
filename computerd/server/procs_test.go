package server

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

func TestParseStat(t *testing.T) {
	p, err := parseStat([]byte("4242 (we (ird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000000 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := procInfo{pid: 4242, ppid: 1, pgid: 4240, state: "S", rssPages: 321, comm: "we (ird) name"}
	if p != want {
		t.Errorf("parseStat = %+v, want %+v", p, want)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q): nil error", bad)
		}
	}
}

func TestProcesses(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	ps, err := h.client.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.PID == os.Getpid() {
			if p.PPID != os.Getppid() || p.RSSKiB <= 0 || !strings.Contains(p.Command, "server.test") && !strings.Contains(p.Command, os.Args[0]) {
				t.Errorf("own entry = %+v", p)
			}
			return
		}
	}
	t.Errorf("the test process %d is not in the list of %d", os.Getpid(), len(ps))
}

func TestKill(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)

	res, err := h.client.Exec(ctx, computerd.ExecRequest{Command: "sleep 300 >/dev/null 2>&1 & echo $$ $!", TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(res.Stdout)
	pgid, _ := strconv.Atoi(f[0])
	pid, _ := strconv.Atoi(f[1])
	defer killPID(pid)
	if !alive(pid) {
		t.Fatalf("background sleep %d is not running", pid)
	}
	if err := h.client.Kill(ctx, computerd.KillRequest{PID: pgid, Group: true, Signal: "SIGKILL"}); err != nil {
		t.Fatalf("kill group %d: %v", pgid, err)
	}
	testkit.EventuallyContext(t, ctx, "killed by group", func() bool { return !alive(pid) })

	res, err = h.client.Exec(ctx, computerd.ExecRequest{Command: "sleep 300 >/dev/null 2>&1 & echo $!", TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	pid, _ = strconv.Atoi(strings.TrimSpace(res.Stdout))
	defer killPID(pid)
	if err := h.client.Kill(ctx, computerd.KillRequest{PID: pid}); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	testkit.EventuallyContext(t, ctx, "killed by TERM", func() bool { return !alive(pid) })

	free := freePID(t)
	err = h.client.Kill(ctx, computerd.KillRequest{PID: free})
	wantAPIError(t, err, http.StatusNotFound, computerd.CodeNotFound, strconv.Itoa(free))
	err = h.client.Kill(ctx, computerd.KillRequest{PID: 0})
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "pid")
	err = h.client.Kill(ctx, computerd.KillRequest{PID: 1, Signal: "BOGUS"})
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "signal")
	err = h.client.Kill(ctx, computerd.KillRequest{PID: os.Getpid()})
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "computerd")
}

// freePID returns a pid that no process has.
func freePID(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Skip("no /proc/sys/kernel/pid_max")
	}
	max, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for pid := max - 1; pid > max-100; pid-- {
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			return pid
		}
	}
	t.Skip("no free pid found")
	return 0
}
