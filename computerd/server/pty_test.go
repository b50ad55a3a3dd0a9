package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

// TestStreamPTY runs a command on a terminal: it is one (tty, stty see it),
// its size follows resize, input typed is echoed and read, ^D ends input,
// and stderr comes with the terminal's output.
func TestStreamPTY(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out, errOut watchWriter
	cmd := `tty; stty size; read line; echo "got:$line"; stty size; echo to-stderr >&2; cat; echo end`
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: cmd, PTY: true, Cols: 100, Rows: 30}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testkit.EventuallyContext(t, ctx, "the first terminal size", func() bool { return strings.Contains(out.String(), "30 100") })
	if !strings.Contains(out.String(), "/dev/pts/") {
		t.Fatalf("not on a terminal: %q", out.String())
	}
	if err := s.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyContext(t, ctx, "the line read back", func() bool { return strings.Contains(out.String(), "got:hello") })
	testkit.EventuallyContext(t, ctx, "the new terminal size", func() bool { return strings.Contains(out.String(), "40 120") })
	testkit.EventuallyContext(t, ctx, "stderr on the terminal", func() bool { return strings.Contains(out.String(), "to-stderr") })
	if err := s.CloseStdin(); err != nil { // ^D ends cat
		t.Fatal(err)
	}
	code, timedOut, err := s.Wait()
	if err != nil || code != 0 || timedOut {
		t.Fatalf("Wait = %d, %v, %v; want 0 (output %q)", code, timedOut, err, out.String())
	}
	if !strings.Contains(out.String(), "end") || errOut.String() != "" {
		t.Errorf("output %q, stderr %q", out.String(), errOut.String())
	}
}

// TestStreamPTYTimeoutKillsSession: a timeout kills the terminal's whole
// session, background jobs included.
func TestStreamPTYTimeoutKillsSession(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out, errOut watchWriter
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: "sleep 300 & echo bg=$!; sleep 300", PTY: true, TimeoutMs: 500}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, timedOut, err := s.Wait()
	if err != nil || !timedOut || code != computerd.TimeoutExitCode {
		t.Fatalf("Wait = %d, %v, %v; want a timeout", code, timedOut, err)
	}
	line := out.String()
	i := strings.Index(line, "bg=")
	if i < 0 {
		t.Fatalf("no background pid in %q", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.Fields(line[i+3:])[0]))
	if err != nil {
		t.Fatalf("background pid in %q: %v", line, err)
	}
	testkit.EventuallyContext(t, ctx, "the background job gone", func() bool { return !alive(pid) })
}
