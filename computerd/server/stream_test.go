package server

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

// watchWriter collects output and tells when it contains a string.
type watchWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestStreamStdin(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out, errOut watchWriter
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: "cat; echo done >&2"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := strings.Repeat("0123456789abcdef", 10000) // several frames
	if _, err := s.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyContext(t, ctx, "echo of the first line", func() bool { return out.String() == "hello\n" })
	if _, err := s.Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	code, timedOut, err := s.Wait()
	if err != nil || code != 0 || timedOut {
		t.Fatalf("Wait = %d, %v, %v; want 0", code, timedOut, err)
	}
	if out.String() != "hello\n"+big || errOut.String() != "done\n" {
		t.Errorf("stdout %d bytes, stderr %q", len(out.String()), errOut.String())
	}
}

func TestStreamExitCode(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out, errOut watchWriter
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: "echo out; echo err >&2; exit 7", Env: map[string]string{"X": "1"}}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	code, timedOut, err := s.Wait()
	if err != nil || code != 7 || timedOut {
		t.Fatalf("Wait = %d, %v, %v; want 7", code, timedOut, err)
	}
	if out.String() != "out\n" || errOut.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

func TestStreamSignal(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out watchWriter
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{
		Command: `trap 'echo caught; exit 3' TERM; echo ready; while :; do sleep 0.05; done`,
	}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testkit.EventuallyContext(t, ctx, "ready", func() bool { return strings.Contains(out.String(), "ready") })
	if err := s.Signal("NOSUCH"); err != nil {
		t.Fatal(err)
	}
	if err := s.Signal("TERM"); err != nil {
		t.Fatal(err)
	}
	code, _, err := s.Wait()
	if err != nil || code != 3 {
		t.Fatalf("Wait = %d, %v; want 3", code, err)
	}
	if !strings.Contains(out.String(), "caught") {
		t.Errorf("stdout %q: the trap did not run", out.String())
	}
}

func TestStreamTimeout(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out watchWriter
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: "echo $$; sleep 300 & sleep 300", TimeoutMs: 300}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, timedOut, err := s.Wait()
	if err != nil || code != computerd.TimeoutExitCode || !timedOut {
		t.Fatalf("Wait = %d, %v, %v; want %d, timed out", code, timedOut, err, computerd.TimeoutExitCode)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	testkit.EventuallyContext(t, ctx, "process group gone", func() bool { return !groupAlive(t, pgid) })
}

func TestStreamDisconnectKills(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out watchWriter
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: "echo $$; sleep 300 & sleep 300"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pgid int
	testkit.EventuallyContext(t, ctx, "pid", func() bool {
		pgid, _ = strconv.Atoi(strings.TrimSpace(out.String()))
		return pgid > 0
	})
	s.Close()
	testkit.EventuallyContext(t, ctx, "process group gone", func() bool { return !groupAlive(t, pgid) })
	if _, _, err := s.Wait(); err == nil {
		t.Error("Wait after Close: nil error, want the broken stream")
	}
	testkit.EventuallyContext(t, ctx, "stream handler done", func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		return len(h.srv.children) == 0
	})
}

func TestStreamErrors(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)

	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: ""}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Wait()
	wantAPIError(t, err, 0, computerd.CodeBadRequest, "command")

	s, err = h.client.ExecStream(ctx, computerd.StreamStart{Command: "true", TimeoutMs: -1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Wait()
	wantAPIError(t, err, 0, computerd.CodeBadRequest, "timeoutMs")

	other := computerd.NewClient(h.ts.URL, computerToken(t, "c-other"), computerd.WithHTTPClient(h.ts.Client()))
	_, err = other.ExecStream(ctx, computerd.StreamStart{Command: "true"}, nil, nil)
	wantAPIError(t, err, http.StatusUnauthorized, computerd.CodeUnauthorized)

	// A plain GET is told to upgrade.
	req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+"/v1/exec/stream", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("plain GET: %d, want 426", resp.StatusCode)
	}
}

func TestStreamHeldOutput(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	var out, errOut watchWriter
	start := time.Now()
	s, err := h.client.ExecStream(ctx, computerd.StreamStart{Command: "sleep 300 & echo $!"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	code, _, err := s.Wait()
	if err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	if pid > 0 {
		defer killPID(pid)
	}
	if d := time.Since(start); d > h.srv.grace+5*time.Second {
		t.Errorf("stream took %s", d)
	}
	if !strings.Contains(errOut.String(), "held open") {
		t.Errorf("stderr %q has no held-output note", errOut.String())
	}
}
