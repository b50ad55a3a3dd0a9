package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

func TestMain(m *testing.M) {
	if os.Getenv(reaperChildEnv) != "" {
		os.Exit(reaperChild())
	}
	testkit.VerifyTestMain(m)
}

// testSecret derives the tokens of the test computers.
var testSecret = bytes.Repeat([]byte("s"), token.MinSecretLen)

func computerToken(t *testing.T, id string) string {
	t.Helper()
	d, err := token.NewDeriver(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return d.Derive(token.Computer, id)
}

// harness is a computerd on loopback with a client holding its token.
type harness struct {
	srv    *Server
	ts     *httptest.Server
	client *computerd.Client
	home   string
	token  string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{home: t.TempDir(), token: computerToken(t, "c-test")}
	h.srv = New(Config{
		TokenHash:   token.Hash(h.token),
		Home:        h.home,
		ComputerID:  "c-test",
		Version:     "test",
		Logger:      testLogger(t),
		OutputGrace: 300 * time.Millisecond,
	})
	h.ts = httptest.NewServer(h.srv)
	t.Cleanup(func() {
		h.srv.Close()
		h.ts.Close()
	})
	h.client = computerd.NewClient(h.ts.URL, h.token, computerd.WithHTTPClient(h.ts.Client()))
	return h
}

// testContext is bounded by the test's deadline, and by 60 s at most.
func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 60*time.Second)
}

// testLogger logs to t.Log until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// wantAPIError checks that err is an *APIError with status and code, whose
// message contains each of words.
func wantAPIError(t *testing.T, err error, status int, code string, words ...string) {
	t.Helper()
	var ae *computerd.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want an APIError %d %s", err, err, status, code)
	}
	if ae.Status != status || ae.Code != code {
		t.Fatalf("err = %d %s %q, want %d %s", ae.Status, ae.Code, ae.Message, status, code)
	}
	for _, w := range words {
		if !strings.Contains(ae.Message, w) {
			t.Errorf("message %q does not mention %q", ae.Message, w)
		}
	}
}

func readFileString(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// alive reports whether pid runs (a zombie has ended).
func alive(pid int) bool {
	p, err := readProc(pid)
	return err == nil && p.state != "Z" && p.state != "X"
}

// groupAlive reports whether a process of group pgid still runs.
func groupAlive(t *testing.T, pgid int) bool {
	t.Helper()
	procs, err := listProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.pgid == pgid && p.state != "Z" && p.state != "X" {
			return true
		}
	}
	return false
}

func TestAuth(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	hc := h.ts.Client()

	get := func(path, auth string) (int, computerd.ErrorBody) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", h.ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb computerd.ErrorBody
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &eb)
		return resp.StatusCode, eb
	}

	for name, auth := range map[string]string{
		"missing":        "",
		"wrong":          "Bearer not-the-token",
		"other computer": "Bearer " + computerToken(t, "c-other"),
		"not bearer":     "Basic " + h.token,
		"bearer only":    "Bearer ",
	} {
		status, eb := get("/v1/processes", auth)
		if status != http.StatusUnauthorized || eb.Error.Code != computerd.CodeUnauthorized {
			t.Errorf("%s token: %d %+v, want 401 unauthorized", name, status, eb)
		}
	}
	if status, _ := get("/v1/processes", "Bearer "+h.token); status != http.StatusOK {
		t.Errorf("right token: %d, want 200", status)
	}
	if status, _ := get("/v1/processes", "bearer "+h.token); status != http.StatusOK {
		t.Errorf("lower-case scheme: %d, want 200", status)
	}

	health, err := computerd.NewClient(h.ts.URL, "", computerd.WithHTTPClient(hc)).Health(ctx)
	if err != nil {
		t.Fatalf("healthz without a token: %v", err)
	}
	if health.Status != "ok" || health.Version != "test" || health.ComputerID != "c-test" {
		t.Errorf("health = %+v", health)
	}

	if status, eb := get("/v1/nothing", "Bearer "+h.token); status != http.StatusNotFound || eb.Error.Code != computerd.CodeNotFound {
		t.Errorf("unknown route: %d %+v, want 404 JSON", status, eb)
	}
	if status, eb := get("/v1/exec", "Bearer "+h.token); status != http.StatusMethodNotAllowed || eb.Error.Code != computerd.CodeBadRequest {
		t.Errorf("wrong method: %d %+v, want 405 JSON", status, eb)
	}
}

func TestEmptyTokenHashAcceptsNothing(t *testing.T) {
	srv := New(Config{Home: t.TempDir(), Logger: testLogger(t)})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := computerd.NewClient(ts.URL, "", computerd.WithHTTPClient(ts.Client()))
	_, err := c.Processes(testContext(t))
	wantAPIError(t, err, http.StatusUnauthorized, computerd.CodeUnauthorized)
}

func TestShutdownWaitsThenKills(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)

	done := make(chan computerd.ExecResult, 1)
	go func() {
		res, _ := h.client.Exec(ctx, computerd.ExecRequest{Command: "sleep 300", TimeoutMs: 60000})
		done <- res
	}()
	testkit.EventuallyContext(t, ctx, "command started", func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		return len(h.srv.children) == 1
	})
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := h.srv.Shutdown(sctx); err == nil {
		t.Fatal("Shutdown returned nil with a command running past its deadline")
	}
	if res := <-done; res.ExitCode != 128+9 {
		t.Errorf("killed command: exit %d, want %d", res.ExitCode, 128+9)
	}
	_, err := h.client.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 1000})
	wantAPIError(t, err, http.StatusServiceUnavailable, computerd.CodeInternal, "shutting down")
}
