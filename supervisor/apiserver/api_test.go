package apiserver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

const opToken = "operator-token-0123456789"

type env struct {
	t     testing.TB
	srv   *httptest.Server
	svc   *supervisor.Service
	fake  *fake.Provider
	clock *clock.Fake
	st    store.Store
	logs  *bytes.Buffer
	tok   *token.Deriver
	h     *apiserver.Handler
	// bearer is the token call sends (default opToken; see as).
	bearer string
}

// machineToken returns the computerd token of the bench agent's session.
func (e *env) machineToken() string {
	x, err := e.st.LiveSession(context.Background(), "bench")
	if err != nil {
		e.t.Fatal(err)
	}
	return e.tok.Derive(token.Computer, x.ComputerID)
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, st)
}

// newEnvWith is newEnv on a given store.
func newEnvWith(t testing.TB, st store.Store, opts ...func(*supervisor.Config)) *env {
	t.Helper()
	e := newService(t, t.TempDir(), st, opts...)
	e.t = t
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(func() {
		e.srv.Close()
		e.fake.Close()
		st.Close()
		if t.Failed() {
			t.Log(e.logs.String())
		}
	})
	return e
}

// newService makes an env's supervisor on st, with its parts in dir and
// the fake provider, and its handler not yet served: newEnvWith serves it
// in the test's process, the supervisor role of the benchmarks in a
// process of its own.
func newService(t supervisortest.T, dir string, st store.Store, opts ...func(*supervisor.Config)) *env {
	t.Helper()
	parts := supervisortest.NewParts(t, dir)
	box, tokens := parts.Box, parts.Tokens
	fp := fake.New(filepath.Join(dir, "machines"), nil)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := supervisor.Config{
		Store: st, Providers: map[string]providers.Provider{"fake": fp}, DefaultProvider: "fake",
		Box: box, Tokens: tokens, Clock: clk, Logger: log, ReadyTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := supervisor.New(cfg)
	if err != nil {
		t.Fatalf("supervisor: %v", err)
	}
	h := apiserver.New(svc, opToken, log)
	return &env{svc: svc, fake: fp, clock: clk, st: st, logs: logs, tok: tokens, h: h, bearer: opToken}
}

// call does a request and decodes the answer into out (when non-nil); it
// returns the status and the error code, if any.
func (e *env) call(method, path string, body any, out any) (int, string) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+e.bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			e.t.Fatalf("%s %s: status %d without an error envelope: %s", method, path, resp.StatusCode, raw)
		}
		e.t.Logf("%s %s -> %d %s: %s", method, path, resp.StatusCode, eb.Error.Code, eb.Error.Message)
		if out != nil {
			json.Unmarshal(raw, out)
		}
		return resp.StatusCode, eb.Error.Code
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, ""
}

func (e *env) mustCall(method, path string, body any, want int, out any) {
	e.t.Helper()
	if st, code := e.call(method, path, body, out); st != want {
		e.t.Fatalf("%s %s: status %d (%s), want %d", method, path, st, code, want)
	}
}

func (e *env) connect(agent string, lease, daily int) {
	e.t.Helper()
	e.mustCall("POST", "/v1/agents", map[string]any{"id": agent, "name": agent, "workspace": "ws-" + agent}, 201, nil)
	e.mustCall("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "fake", "leaseSeconds": lease, "dailySeconds": daily}, 201, nil)
}

func TestFiveTools(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	if s.State != "running" || s.Provider != "fake" || s.RemainingSeconds != 300 || s.ID == "" {
		t.Fatalf("start = %+v", s)
	}
	var list struct {
		Computers []supervisor.ComputerView `json:"computers"`
	}
	e.mustCall("GET", "/v1/computers", nil, 200, &list)
	if len(list.Computers) != 1 || list.Computers[0].Agent != "a1" || list.Computers[0].Session == nil || list.Computers[0].Session.ID != s.ID {
		t.Fatalf("computers = %+v", list.Computers)
	}
	var again supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &again)
	if again.ID != s.ID {
		t.Fatalf("second start made session %s, want the running %s", again.ID, s.ID)
	}
	if c, _ := e.fake.Counts(); c != 1 {
		t.Fatalf("creates = %d, want 1", c)
	}

	var x supervisor.ExecResult
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "echo hi; echo oops >&2; exit 3"}, 200, &x)
	if x.ExitCode != 3 || x.Stdout != "hi\n" || x.Stderr != "oops\n" || x.Truncated || x.TimedOut || x.Uncertain {
		t.Fatalf("exec = %+v", x)
	}

	var w supervisor.WriteResult
	e.mustCall("POST", "/v1/agents/a1/computer/write_file", map[string]any{"path": "notes/hello.txt", "content": "héllo wörld\n"}, 200, &w)
	if w.Bytes != int64(len("héllo wörld\n")) || len(w.SHA256) != 64 {
		t.Fatalf("write = %+v", w)
	}
	var r supervisor.ReadResult
	e.mustCall("POST", "/v1/agents/a1/computer/read_file", map[string]any{"path": "notes/hello.txt"}, 200, &r)
	if r.Content != "héllo wörld\n" || r.Truncated || r.NextOffset != nil {
		t.Fatalf("read = %+v", r)
	}
	// The file is where the computer's shell sees it.
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "cat $HOME/notes/hello.txt"}, 200, &x)
	if x.Stdout != "héllo wörld\n" {
		t.Fatalf("cat = %q", x.Stdout)
	}

	e.clock.Advance(100 * time.Second)
	var st supervisor.StatusView
	e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, &st)
	if st.Session == nil || st.Session.RemainingSeconds != 200 || st.Budget.ReservedSeconds != 300 || st.Budget.LeftSeconds != 3300 {
		t.Fatalf("status = %+v session %+v", st.Budget, st.Session)
	}
	var stopped supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/stop", nil, 200, &stopped)
	if stopped.State != "stopped" {
		t.Fatalf("stop = %+v", stopped)
	}
	if _, d := e.fake.Counts(); d != 1 {
		t.Fatalf("destroys = %d", d)
	}
	e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, &st)
	if st.Session != nil || st.Budget.UsedSeconds != 100 || st.Budget.ReservedSeconds != 0 || st.Budget.LeftSeconds != 3500 {
		t.Fatalf("after stop: budget %+v session %+v", st.Budget, st.Session)
	}
	if code, c := e.call("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "true"}, nil); code != 409 || c != supervisor.CodeNoSession {
		t.Fatalf("exec after stop: %d %s", code, c)
	}
	// The next start begins empty.
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	if code, _ := e.call("POST", "/v1/agents/a1/computer/read_file", map[string]any{"path": "notes/hello.txt"}, nil); code != 404 {
		t.Fatalf("read in a new session: %d, want 404", code)
	}
	var usage supervisor.UsageView
	e.mustCall("GET", "/v1/usage?by=workspace", nil, 200, &usage)
	if len(usage.Rows) != 1 || usage.Rows[0].Key != "ws-a1" || usage.Rows[0].Seconds != 100 || usage.Rows[0].Sessions != 2 {
		t.Fatalf("usage = %+v", usage.Rows)
	}
	e.mustCall("DELETE", "/v1/agents/a1/computer", nil, 200, nil)
	if _, err := e.st.GetConnection(context.Background(), "a1"); err == nil {
		t.Fatal("connection kept after disconnect")
	}
	if ms, _ := e.fake.List(context.Background()); len(ms) != 0 {
		t.Fatalf("machines left after disconnect: %v", ms)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	e.mustCall("POST", "/v1/agents", map[string]any{"id": "a1", "name": "one"}, 201, nil)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, mention      string
	}{
		{"no token", "", "", nil, 401, "unauthorized", "token"},
		{"lease 59", "POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake", "leaseSeconds": 59}, 422, "limit_exceeded", "leaseSeconds"},
		{"lease 901", "POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake", "leaseSeconds": 901}, 422, "limit_exceeded", "60..900"},
		{"daily below lease", "POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake", "leaseSeconds": 600, "dailySeconds": 599}, 422, "limit_exceeded", "dailySeconds"},
		{"daily above a day", "POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake", "dailySeconds": 86401}, 422, "limit_exceeded", "86400"},
		{"unknown provider", "POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "nope"}, 400, "bad_request", "provider"},
		{"unknown agent", "POST", "/v1/computers", map[string]any{"agent": "ghost", "provider": "fake"}, 404, "not_found", "ghost"},
		{"bad image", "POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake", "image": "gpu"}, 400, "bad_request", "image"},
		{"unknown field", "POST", "/v1/computers", `{"agent":"a1","provder":"fake"}`, 400, "bad_request", "provder"},
		{"not json", "POST", "/v1/agents", `{"name":`, 400, "bad_request", "body"},
		{"agent without name", "POST", "/v1/agents", map[string]any{"id": "a2"}, 400, "bad_request", "name"},
		{"status of unknown agent", "GET", "/v1/agents/ghost/computer", nil, 404, "not_found", "ghost"},
		{"start without connection", "POST", "/v1/agents/a1/computer/start", nil, 404, "not_found", "POST /v1/computers"},
		{"usage by nonsense", "GET", "/v1/usage?by=planet", nil, 400, "bad_request", "by"},
		{"usage bad from", "GET", "/v1/usage?from=yesterday", nil, 400, "bad_request", "from"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if c.method == "" {
				resp, err := http.Post(e.srv.URL+"/v1/agents", "application/json", strings.NewReader(`{"name":"x"}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 401 {
					t.Fatalf("status %d, want 401", resp.StatusCode)
				}
				return
			}
			status, code := e.call(c.method, c.path, c.body, &out)
			if status != c.status || code != c.code || !strings.Contains(out.Error.Message, c.mention) {
				t.Fatalf("got %d %s %q; want %d %s mentioning %q", status, code, out.Error.Message, c.status, c.code, c.mention)
			}
		})
	}
	// Nothing half-done: no connection was stored by the refusals.
	if _, err := e.st.GetConnection(context.Background(), "a1"); err == nil {
		t.Fatal("a refused connect left a connection behind")
	}
	e.mustCall("POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake"}, 201, nil)
	if st, code := e.call("POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake"}, nil); st != 409 || code != "conflict" {
		t.Fatalf("second connection: %d %s", st, code)
	}
	if st, code := e.call("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "true"}, nil); st != 409 || code != "no_session" {
		t.Fatalf("exec without session: %d %s", st, code)
	}
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)

	toolCases := []struct {
		name, tool    string
		body          any
		status        int
		code, mention string
	}{
		{"timeout 121", "exec", map[string]any{"command": "true", "timeoutSeconds": 121}, 422, "limit_exceeded", "timeoutSeconds"},
		{"timeout 0", "exec", map[string]any{"command": "true", "timeoutSeconds": 0}, 422, "limit_exceeded", "1..120"},
		{"empty command", "exec", map[string]any{"command": " "}, 400, "bad_request", "command"},
		{"write 16001", "write_file", map[string]any{"path": "big.txt", "content": strings.Repeat("é", 16001)}, 422, "limit_exceeded", "16000"},
		{"write no path", "write_file", map[string]any{"content": "x"}, 400, "bad_request", "path"},
		{"read negative offset", "read_file", map[string]any{"path": "x", "offset": -1}, 400, "bad_request", "offset"},
		{"read missing file", "read_file", map[string]any{"path": "nope.txt"}, 404, "not_found", "nope.txt"},
		{"confirm false", "confirm-cleanup", map[string]any{"providerCleanupConfirmed": false}, 400, "bad_request", "providerCleanupConfirmed"},
		{"confirm empty", "confirm-cleanup", map[string]any{}, 400, "bad_request", "providerCleanupConfirmed"},
		{"confirm string", "confirm-cleanup", map[string]any{"providerCleanupConfirmed": "true"}, 400, "bad_request", "providerCleanupConfirmed"},
	}
	for _, c := range toolCases {
		t.Run(c.name, func(t *testing.T) {
			var out struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			status, code := e.call("POST", "/v1/agents/a1/computer/"+c.tool, c.body, &out)
			if status != c.status || code != c.code || !strings.Contains(out.Error.Message, c.mention) {
				t.Fatalf("got %d %s %q; want %d %s mentioning %q", status, code, out.Error.Message, c.status, c.code, c.mention)
			}
		})
	}
	// A 16,000-character write is fine; the failed 16,001 left nothing.
	e.mustCall("POST", "/v1/agents/a1/computer/write_file", map[string]any{"path": "big.txt", "content": strings.Repeat("é", 16000)}, 200, nil)
	if st, _ := e.call("POST", "/v1/agents/a1/computer/read_file", map[string]any{"path": "big.txt"}, nil); st != 200 {
		t.Fatalf("read back: %d", st)
	}
	if strings.Contains(e.logs.String(), opToken) {
		t.Fatal("the operator token reached the log")
	}
}

func TestReadLongAndNonUTF8(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	home := e.fake.Home("fake-" + s.ID[2:])
	if home == "" {
		t.Fatal("no home for the machine")
	}
	long := strings.Repeat("ab€", 10000) // 30,000 characters
	os.WriteFile(filepath.Join(home, "long.txt"), []byte(long), 0o644)
	var r supervisor.ReadResult
	e.mustCall("POST", "/v1/agents/a1/computer/read_file", map[string]any{"path": "long.txt"}, 200, &r)
	if !r.Truncated || r.NextOffset == nil || *r.NextOffset != 24000 || len([]rune(r.Content)) != 24000 {
		t.Fatalf("first read: truncated %v next %v chars %d", r.Truncated, r.NextOffset, len([]rune(r.Content)))
	}
	var r2 supervisor.ReadResult
	e.mustCall("POST", "/v1/agents/a1/computer/read_file", map[string]any{"path": "long.txt", "offset": *r.NextOffset}, 200, &r2)
	if r2.Truncated || r.Content+r2.Content != long {
		t.Fatalf("second read: truncated %v, joined content differs", r2.Truncated)
	}
	os.WriteFile(filepath.Join(home, "bin.dat"), []byte{'o', 'k', 0xff, 0xfe}, 0o644)
	var out struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if st, code := e.call("POST", "/v1/agents/a1/computer/read_file", map[string]any{"path": "bin.dat"}, &out); st != 422 || code != "not_utf8" {
		t.Fatalf("non-UTF-8 read: %d %s", st, code)
	}
}

func TestBudget(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 600, 1000)
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	if s.RemainingSeconds != 600 {
		t.Fatalf("first session reserved %d, want 600", s.RemainingSeconds)
	}
	e.clock.Advance(650 * time.Second)
	e.svc.Reap(context.Background()) // expires the session at 600 s
	var st supervisor.StatusView
	e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, &st)
	if st.Session != nil || st.Budget.UsedSeconds != 600 || st.Budget.LeftSeconds != 400 {
		t.Fatalf("after expiry: %+v %+v", st.Budget, st.Session)
	}
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	if s.RemainingSeconds != 400 {
		t.Fatalf("second session reserved %d, want the 400 left", s.RemainingSeconds)
	}
	e.clock.Advance(370 * time.Second)
	e.mustCall("POST", "/v1/agents/a1/computer/stop", nil, 200, nil)
	var out struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if code, c := e.call("POST", "/v1/agents/a1/computer/start", nil, &out); code != 409 || c != "budget_exhausted" ||
		!strings.Contains(out.Error.Message, "30 s left") || !strings.Contains(out.Error.Message, "2026-03-02T00:00:00Z") {
		t.Fatalf("start with 30 s left: %d %s %q", code, c, out.Error.Message)
	}
	// Midnight UTC resets the budget.
	e.clock.Set(time.Date(2026, 3, 2, 0, 0, 1, 0, time.UTC))
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	if s.RemainingSeconds != 600 {
		t.Fatalf("after midnight reserved %d, want 600", s.RemainingSeconds)
	}
}

func TestExecTimeoutCappedByLease(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 60, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	e.clock.Advance(59 * time.Second) // one second of lease left
	var x supervisor.ExecResult
	start := time.Now()
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "sleep 30", "timeoutSeconds": 120}, 200, &x)
	if !x.TimedOut || time.Since(start) > 10*time.Second {
		t.Fatalf("exec past the lease: %+v after %s", x, time.Since(start))
	}
}

func TestUncertainExec(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	done := make(chan supervisor.ExecResult, 1)
	go func() {
		var x supervisor.ExecResult
		e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "touch running; sleep 20"}, 200, &x)
		done <- x
	}()
	running := filepath.Join(e.fake.Home("fake-"+s.ID[2:]), "running")
	testkit.Eventually(t, 10*time.Second, "the command running", func() bool { _, err := os.Stat(running); return err == nil })
	e.fake.Kill("fake-" + s.ID[2:])
	select {
	case x := <-done:
		if !x.Uncertain || !strings.Contains(x.Advice, "Inspect") {
			t.Fatalf("exec whose machine died: %+v", x)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("exec did not return after its machine died")
	}
}

func TestLostCreateReplyIsAdopted(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.fake.SetFaults(fake.Faults{LoseCreateReplies: 1})
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	if s.State != "running" {
		t.Fatalf("state %s", s.State)
	}
	if c, _ := e.fake.Counts(); c != 1 {
		t.Fatalf("creates = %d, want 1: a lost reply must not create another machine", c)
	}
	var x supervisor.ExecResult
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "echo adopted"}, 200, &x)
	if x.Stdout != "adopted\n" {
		t.Fatalf("exec on adopted machine: %+v", x)
	}
}

func TestUncertainCreate(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: fmt.Errorf("reset by peer")})
	if st, code := e.call("POST", "/v1/agents/a1/computer/start", nil, nil); st != 502 || code != supervisor.CodeUncertain {
		t.Fatalf("start with lost reply and nothing found: %d %s", st, code)
	}
	if st, code := e.call("POST", "/v1/agents/a1/computer/start", nil, nil); st != 409 || code != supervisor.CodeUncertain {
		t.Fatalf("start while uncertain: %d %s", st, code)
	}
	if c, _ := e.fake.Counts(); c != 1 {
		t.Fatalf("creates = %d: no machine may be created while uncertain", c)
	}
	e.mustCall("POST", "/v1/agents/a1/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, 200, nil)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
}

func TestDefiniteCreateFailureGivesTimeBack(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: providers.ErrCapacity})
	if st, code := e.call("POST", "/v1/agents/a1/computer/start", nil, nil); st != 503 || code != supervisor.CodeUnavailable {
		t.Fatalf("start at capacity: %d %s", st, code)
	}
	var st supervisor.StatusView
	e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, &st)
	if st.Budget.LeftSeconds != 3600 || st.Session != nil {
		t.Fatalf("budget after failed create: %+v", st.Budget)
	}
}

func TestCleanupRetriesUntilDone(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	e.fake.SetFaults(fake.Faults{FailDestroys: 100})
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/stop", nil, 200, &s)
	if s.State != "stopping" {
		t.Fatalf("stop with failing destroy: %s", s.State)
	}
	for i := 0; i < supervisor.CleanupFailedAfter; i++ {
		e.clock.Advance(15 * time.Minute)
		e.svc.Reap(context.Background())
	}
	x, err := e.st.GetSession(context.Background(), s.ID)
	if err != nil || x.State != store.StateCleanupFailed || x.CleanupTries < supervisor.CleanupFailedAfter {
		t.Fatalf("after failures: %+v %v", x, err)
	}
	if st, _ := e.call("DELETE", "/v1/agents/a1/computer", nil, nil); st != 409 {
		t.Fatalf("disconnect while cleanup pending: %d, want 409 (credentials must stay)", st)
	}
	// It keeps being retried; once the provider recovers it finishes.
	e.fake.SetFaults(fake.Faults{})
	e.clock.Advance(15 * time.Minute)
	e.svc.Reap(context.Background())
	x, _ = e.st.GetSession(context.Background(), s.ID)
	if x.State != store.StateStopped {
		t.Fatalf("after recovery: %s", x.State)
	}
	if ms, _ := e.fake.List(context.Background()); len(ms) != 0 {
		t.Fatalf("machine left: %v", ms)
	}
	e.mustCall("DELETE", "/v1/agents/a1/computer", nil, 200, nil)
}

func TestConfirmClosesFailedCleanup(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	e.fake.SetFaults(fake.Faults{FailDestroys: 1000})
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/stop", nil, 200, &s)
	var v supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, 200, &v)
	if v.State != "stopped" {
		t.Fatalf("confirm: %+v", v)
	}
	e.mustCall("DELETE", "/v1/agents/a1/computer", nil, 200, nil)
}

func TestHealthz(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz %d", resp.StatusCode)
	}
}

// requestHash mirrors how the supervisor fingerprints a tool request.
func requestHash(tool string, canon []byte) string {
	h := sha256.Sum256(append([]byte(tool+"\n"), canon...))
	return hex.EncodeToString(h[:])
}

// TestStartAfterExpiryBeforeReap starts again once the lease has run out but
// before the reaper has ended the session: the old one is ended (charged
// its full lease) and a new one starts.
func TestStartAfterExpiryBeforeReap(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 60, 3600)
	var first, second supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &first)
	e.clock.Advance(61 * time.Second)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &second)
	if second.ID == first.ID || second.RemainingSeconds != 60 {
		t.Fatalf("start after expiry: %+v (first %s)", second, first.ID)
	}
	x, err := e.st.GetSession(context.Background(), first.ID)
	if err != nil || x.State != store.StateExpired || x.ChargedSeconds != 60 {
		t.Fatalf("first session: %+v %v", x, err)
	}
}
