package server

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

func TestExec(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	t.Setenv(computerd.EnvTokenHash, "secret-hash")
	t.Setenv(computerd.EnvComputerID, "secret-id")

	res, err := h.client.Exec(ctx, computerd.ExecRequest{
		Command:   `echo out; echo err >&2; pwd; echo "$HOME"; echo "${BERTH_TOKEN_SHA256-unset} ${BERTH_COMPUTER_ID-unset} $GREETING"; exit 3`,
		TimeoutMs: 10000,
		Env:       map[string]string{"GREETING": "hi"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOut := fmt.Sprintf("out\n%s\n%s\nunset unset hi\n", h.home, h.home)
	if res.ExitCode != 3 || res.Stdout != wantOut || res.Stderr != "err\n" || res.TimedOut {
		t.Errorf("result = %+v, want exit 3, stdout %q, stderr %q", res, wantOut, "err\n")
	}
	if res.StdoutBytes != int64(len(wantOut)) || res.StderrBytes != 4 || res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("counts = %d/%d truncated %v/%v", res.StdoutBytes, res.StderrBytes, res.StdoutTruncated, res.StderrTruncated)
	}

	res, err = h.client.Exec(ctx, computerd.ExecRequest{Command: "tr a-z A-Z; pwd", Stdin: "hello", Cwd: "/", TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "HELLO/\n" || res.ExitCode != 0 {
		t.Errorf("stdin and cwd: %+v", res)
	}

	res, err = h.client.Exec(ctx, computerd.ExecRequest{Command: "kill -TERM $$", TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+15 {
		t.Errorf("killed by TERM: exit %d, want %d", res.ExitCode, 128+15)
	}
}

func TestExecLimits(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	for _, tc := range []struct {
		name   string
		req    computerd.ExecRequest
		status int
		code   string
		words  []string
	}{
		{"no timeout", computerd.ExecRequest{Command: "true"}, 400, computerd.CodeBadRequest, []string{"timeoutMs", "0"}},
		{"timeout over max", computerd.ExecRequest{Command: "true", TimeoutMs: computerd.MaxExecTimeoutMs + 1}, 400, computerd.CodeBadRequest,
			[]string{"timeoutMs", strconv.Itoa(computerd.MaxExecTimeoutMs)}},
		{"negative timeout", computerd.ExecRequest{Command: "true", TimeoutMs: -5}, 400, computerd.CodeBadRequest, []string{"timeoutMs"}},
		{"no command", computerd.ExecRequest{Command: "  ", TimeoutMs: 1000}, 400, computerd.CodeBadRequest, []string{"command"}},
		{"output over max", computerd.ExecRequest{Command: "true", TimeoutMs: 1000, MaxOutputBytes: computerd.MaxOutputBytes + 1}, 400, computerd.CodeBadRequest,
			[]string{"maxOutputBytes", strconv.Itoa(computerd.MaxOutputBytes)}},
		{"stdin over max", computerd.ExecRequest{Command: "true", TimeoutMs: 1000, Stdin: strings.Repeat("x", computerd.MaxStdinBytes+1)}, 413, computerd.CodeTooLarge,
			[]string{"stdin"}},
		{"command over max", computerd.ExecRequest{Command: strings.Repeat("x", maxCommandBytes+1), TimeoutMs: 1000}, 413, computerd.CodeTooLarge, []string{"command"}},
		{"bad cwd", computerd.ExecRequest{Command: "true", TimeoutMs: 1000, Cwd: "no/such/dir"}, 400, computerd.CodeBadRequest, []string{"cwd"}},
		{"bad env", computerd.ExecRequest{Command: "true", TimeoutMs: 1000, Env: map[string]string{"A=B": "c"}}, 400, computerd.CodeBadRequest, []string{"env"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.Exec(ctx, tc.req)
			wantAPIError(t, err, tc.status, tc.code, tc.words...)
		})
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) is not installed")
	}
	h := newHarness(t)
	ctx := testContext(t)

	// The group: the shell and two sleeps. Below it, a process that left
	// for a session of its own.
	start := time.Now()
	res, err := h.client.Exec(ctx, computerd.ExecRequest{
		Command:   `echo $$; setsid sh -c 'echo $$; exec sleep 300' & sleep 300 & sleep 300`,
		TimeoutMs: 300,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != computerd.TimeoutExitCode {
		t.Fatalf("result = %+v, want timed out with exit %d", res, computerd.TimeoutExitCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timed-out exec took %s", d)
	}
	pids := strings.Fields(res.Stdout)
	if len(pids) != 2 {
		t.Fatalf("stdout %q: want the shell's and the escapee's pid", res.Stdout)
	}
	pgid, _ := strconv.Atoi(pids[0])
	escapee, _ := strconv.Atoi(pids[1])
	testkit.EventuallyContext(t, ctx, "process group gone", func() bool { return !groupAlive(t, pgid) })
	testkit.EventuallyContext(t, ctx, "escaped session gone", func() bool { return !alive(escapee) })
	if err := syscall.Kill(-pgid, 0); err != nil && err != syscall.ESRCH && err != syscall.EPERM {
		t.Errorf("kill(-%d, 0) = %v", pgid, err)
	}
}

func TestExecCallerGoneKillsGroup(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	pidFile := h.home + "/pid"
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Exec(cctx, computerd.ExecRequest{Command: "echo $$ >pid.tmp && mv pid.tmp pid; sleep 300 & sleep 300", TimeoutMs: 60000})
		done <- err
	}()
	var pgid int
	testkit.EventuallyContext(t, ctx, "command started", func() bool {
		b, err := readFileString(pidFile)
		pgid, _ = strconv.Atoi(strings.TrimSpace(b))
		return err == nil && pgid > 0
	})
	cancel()
	<-done
	testkit.EventuallyContext(t, ctx, "process group gone", func() bool { return !groupAlive(t, pgid) })
}

func TestExecOutputBounds(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	res, err := h.client.Exec(ctx, computerd.ExecRequest{
		Command:        `printf HEAD; head -c 100000 /dev/zero | tr '\0' x; printf TAIL; printf short >&2`,
		TimeoutMs:      10000,
		MaxOutputBytes: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	const total = 100008
	if res.StdoutBytes != total || !res.StdoutTruncated {
		t.Fatalf("stdout: %d bytes, truncated %v; want %d, true", res.StdoutBytes, res.StdoutTruncated, total)
	}
	marker := truncationMarker(total - 1000)
	want := "HEAD" + strings.Repeat("x", 496) + marker + strings.Repeat("x", 496) + "TAIL"
	if res.Stdout != want {
		t.Errorf("stdout = %q...%q (%d bytes), want head, %q, tail", res.Stdout[:20], res.Stdout[len(res.Stdout)-20:], len(res.Stdout), marker)
	}
	if res.Stderr != "short" || res.StderrTruncated || res.StderrBytes != 5 {
		t.Errorf("stderr = %q truncated %v bytes %d", res.Stderr, res.StderrTruncated, res.StderrBytes)
	}
}

func TestExecLargeOutputMemory(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := h.client.Exec(ctx, computerd.ExecRequest{Command: "yes | head -c 50000000", TimeoutMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if res.StdoutBytes != 50000000 || !res.StdoutTruncated || res.ExitCode != 0 {
		t.Fatalf("result: %d bytes, truncated %v, exit %d", res.StdoutBytes, res.StdoutTruncated, res.ExitCode)
	}
	if n := len(res.Stdout); n > computerd.DefaultOutputBytes+64 {
		t.Errorf("stdout is %d bytes, bound %d", n, computerd.DefaultOutputBytes)
	}
	// Server and client share this process: all they allocated for 50 MB
	// of output must stay near the bound.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("allocated %d MiB for 50 MB of output", alloc>>20)
	}
}

func TestExecUTF8(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)

	// Bytes that are not UTF-8 become U+FFFD.
	res, err := h.client.Exec(ctx, computerd.ExecRequest{Command: `printf 'a\377b\303'`, TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "a\uFFFDb\uFFFD" || res.StdoutBytes != 4 {
		t.Errorf("stdout = %q (%d bytes), want %q", res.Stdout, res.StdoutBytes, "a\uFFFDb\uFFFD")
	}

	// 'é' (2 bytes) straddles the end of the 5-byte head and '€' (3 bytes)
	// the start of the 5-byte tail: both are dropped whole.
	res, err = h.client.Exec(ctx, computerd.ExecRequest{Command: `printf 'abcdé0123456789€wxyz'`, TimeoutMs: 10000, MaxOutputBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len("abcdé0123456789€wxyz"))
	want := "abcd" + truncationMarker(total-8) + "wxyz"
	if res.Stdout != want || res.StdoutBytes != total || !res.StdoutTruncated {
		t.Errorf("stdout = %q (%d bytes), want %q (%d bytes)", res.Stdout, res.StdoutBytes, want, total)
	}
}

func TestCapture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int
		writes []string
		want   string
		cut    bool
	}{
		{"fits", 10, []string{"0123456789"}, "0123456789", false},
		{"fits in pieces", 10, []string{"012", "3456", "789"}, "0123456789", false},
		{"cut", 4, []string{"0123456789"}, "01" + truncationMarker(6) + "89", true},
		{"cut in pieces", 6, []string{"ab", "cdef", "g", "hijk", "lm"}, "abc" + truncationMarker(7) + "klm", true},
		{"ring wraps", 4, []string{"a", "b", "c", "d", "e", "f", "g"}, "ab" + truncationMarker(3) + "fg", true},
		{"rune split in head", 4, []string{"a\u00e9", "xxxx", "yz"}, "a" + truncationMarker(6) + "yz", true},
		{"rune split in tail", 5, []string{"ab", "zzzz", "\u20acx"}, "ab" + truncationMarker(7) + "x", true},
		{"rune whole across pieces", 8, []string{"ab\xe2", "\x82\xac"}, "ab\u20ac", false},
		{"invalid bytes", 8, []string{"a\xffb"}, "a\uFFFDb", false},
		{"odd limit", 5, []string{"0123456789"}, "01" + truncationMarker(5) + "789", true},
		{"limit one", 1, []string{"0123"}, truncationMarker(3) + "3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.limit)
			var total int
			for _, w := range tc.writes {
				c.Write([]byte(w))
				total += len(w)
			}
			got, cut := c.result()
			if got != tc.want || cut != tc.cut {
				t.Errorf("result = %q, %v; want %q, %v", got, cut, tc.want, tc.cut)
			}
			if c.total != int64(total) {
				t.Errorf("total = %d, want %d", c.total, total)
			}
			if !utf8.ValidString(got) {
				t.Errorf("result %q is not valid UTF-8", got)
			}
			if len(c.head) > tc.limit || len(c.tail) > tc.limit || cap(c.head) > tc.limit || cap(c.tail) > tc.limit {
				t.Errorf("buffers grew past the bound: head %d/%d tail %d/%d", len(c.head), cap(c.head), len(c.tail), cap(c.tail))
			}
		})
	}
}

func TestExecBackground(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)

	// Output redirected: the call returns at once and the process lives on.
	start := time.Now()
	res, err := h.client.Exec(ctx, computerd.ExecRequest{Command: "nohup sleep 300 >/dev/null 2>&1 & echo $!", TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= h.srv.grace {
		t.Errorf("exec with redirected background took %s, want under the grace %s", d, h.srv.grace)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if pid > 0 {
		defer killPID(pid)
	}
	if pid <= 0 || !alive(pid) {
		t.Fatalf("background process %q is not running after the call", res.Stdout)
	}
	if strings.Contains(res.Stderr, "computerd:") {
		t.Errorf("stderr has a marker: %q", res.Stderr)
	}

	// Output held open: the call returns after the grace, says why, and
	// the process is not killed for it.
	start = time.Now()
	res, err = h.client.Exec(ctx, computerd.ExecRequest{Command: "sleep 300 & echo $!", TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if d < h.srv.grace || d > h.srv.grace+5*time.Second {
		t.Errorf("exec with a background process holding stdout took %s, want about the grace %s", d, h.srv.grace)
	}
	held, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if held > 0 {
		defer killPID(held)
	}
	if res.ExitCode != 0 || res.TimedOut || !strings.Contains(res.Stderr, "held open") {
		t.Errorf("result = %+v, want exit 0 and a held-output note on stderr", res)
	}
	if held <= 0 || !alive(held) {
		t.Errorf("background process %q was killed", res.Stdout)
	}
}

func TestExecMethodAndBody(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	req, _ := http.NewRequestWithContext(ctx, "POST", h.ts.URL+"/v1/exec", strings.NewReader("{not json"))
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed body: %d, want 400", resp.StatusCode)
	}
}
