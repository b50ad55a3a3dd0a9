package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/api/apitest"
	"github.com/berthdev/berth/internal/testkit"

	"github.com/spf13/cobra"
)

const testToken = "tok-test"

// testContext returns a context that ends before the test's deadline.
func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 30*time.Second)
}

// call is one request the fake supervisor received.
type call = apitest.Request

// supervisor is a scripted supervisor that berth is pointed at: each
// "METHOD /path" route answers from a queue (the last answer repeats).
type supervisor struct{ *apitest.Server }

// newSupervisor starts a fake supervisor and points berth at it through
// the environment, with no agent set.
func newSupervisor(t *testing.T) *supervisor {
	t.Helper()
	s := &supervisor{apitest.New(t)}
	t.Setenv("BERTH_URL", s.URL)
	t.Setenv("SUPERVISOR_TOKEN", testToken)
	t.Setenv("BERTH_AGENT", "")
	return s
}

// on adds an answer to route's queue.
func (s *supervisor) on(route string, status int, body string) {
	s.Then(route, apitest.Answer{Status: status, Body: body})
}

func (s *supervisor) requests() []call { return s.Requests() }

// only returns the one request made, failing the test otherwise.
func (s *supervisor) only(t *testing.T) call {
	t.Helper()
	c := s.Only(t)
	if c.Auth != "Bearer "+testToken {
		t.Errorf("Authorization = %q", c.Auth)
	}
	return c
}

// result is what one run of berth did.
type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runContext(testContext(t), t, stdin, args...)
}

func runContext(ctx context.Context, t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(ctx, args, strings.NewReader(stdin), &out, &errb)
	t.Logf("berth %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out.String(), errb.String())
	return result{code, out.String(), errb.String()}
}

func (r result) want(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code = %d, want %d", r.code, code)
	}
	if r.stdout != stdout {
		t.Errorf("stdout = %q, want %q", r.stdout, stdout)
	}
	if r.stderr != stderr {
		t.Errorf("stderr = %q, want %q", r.stderr, stderr)
	}
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("JSON %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("JSON = %s, want %s", gb, wb)
	}
}

func TestVersion(t *testing.T) {
	r := run(t, "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "berth "+version) {
		t.Errorf("version: %+v", r)
	}
	r = run(t, "", "version", "--json")
	var b buildInfo
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b.Version != version || b.Go == "" {
		t.Errorf("version --json = %q (%v)", r.stdout, err)
	}
	run(t, "", "--version").want(t, 0, "berth "+version+"\n", "")
}

func TestUsageErrors(t *testing.T) {
	s := newSupervisor(t)
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "berth"`},
		{[]string{"computer", "strat"}, `unknown command "strat" for "berth computer"; did you mean start?`},
		{[]string{"computer", "start", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"computer", "start"}, "no agent: pass --agent or set BERTH_AGENT"},
		{[]string{"computer", "exec", "--agent", "a1"}, "requires at least 1 arg(s), only received 0"},
		{[]string{"computer", "read", "--agent", "a1"}, "accepts 1 arg(s), received 0"},
		// A malformed credential may be a bare secret: it is not echoed whole.
		{[]string{"computer", "connect", "--agent", "a1", "--credential", "sk-secret"}, `--credential "sk-s…": want key=value or key=@FILE`},
		{[]string{"computer", "connect", "--agent", "a1", "--lease", "ten"}, `invalid argument "ten" for "--lease" flag`},
		{[]string{"usage", "--by", "agent"}, `--by "agent": want provider or workspace`},
		{[]string{"usage", "--from", "yesterday"}, `--from "yesterday": want an RFC 3339 time`},
		{[]string{"usage", "--from", "2025-02-01", "--to", "2025-01-01"}, "--to must be after --from"},
		{[]string{"agent", "create"}, "accepts 1 arg(s), received 0"},
		{[]string{"--url", "127.0.0.1:8080", "computer", "start", "--agent", "a1"}, "supervisor URL"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := run(t, "", tt.args...)
			if r.code != exitUsage {
				t.Errorf("exit code = %d, want %d", r.code, exitUsage)
			}
			if !strings.HasPrefix(r.stderr, "berth: ") || !strings.Contains(r.stderr, tt.msg) || !strings.Contains(r.stderr, "--help' for usage") {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tt.msg)
			}
		})
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests made for usage errors", n)
	}
}

func TestNoToken(t *testing.T) {
	newSupervisor(t)
	t.Setenv("SUPERVISOR_TOKEN", "")
	r := run(t, "", "computer", "status", "--agent", "a1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "berth: no operator token: set SUPERVISOR_TOKEN or pass --token") {
		t.Errorf("%+v", r)
	}
}

func TestGroupAloneShowsHelp(t *testing.T) {
	r := run(t, "", "computer")
	if r.code != 0 || !strings.Contains(r.stdout, "Available Commands") || !strings.Contains(r.stdout, "confirm-cleanup") {
		t.Errorf("%+v", r)
	}
}

func TestAPIErrorExitsOne(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusConflict, `{"error":{"code":"budget_exhausted","message":"daily budget has 30 s left, a session needs at least 60 s"}}`)
	run(t, "", "computer", "start", "--agent", "a1").
		want(t, exitFailure, "", "berth: daily budget has 30 s left, a session needs at least 60 s (budget_exhausted)\n")
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a2/computer", http.StatusOK, `{"connection":{},"session":null,"budget":{}}`)
	t.Setenv("BERTH_URL", "http://127.0.0.1:1")
	t.Setenv("SUPERVISOR_TOKEN", "wrong")
	t.Setenv("BERTH_AGENT", "a1")
	r := run(t, "", "--url", s.URL, "--token", testToken, "computer", "status", "--agent", "a2")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if c := s.only(t); c.Path != "/v1/agents/a2/computer" {
		t.Errorf("path = %s", c.Path)
	}
}

func TestAgentFromEnvironment(t *testing.T) {
	s := newSupervisor(t)
	t.Setenv("BERTH_AGENT", "from-env")
	s.on("POST /v1/agents/from-env/computer/stop", http.StatusOK, `{"id":"s1","state":"stopped","provider":"docker"}`)
	run(t, "", "computer", "stop").want(t, 0, "session s1 stopped on docker\n", "")
	s.only(t)
}

func TestInterrupted(t *testing.T) {
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // so that the server notices the client leaving
		close(arrived)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	t.Setenv("BERTH_URL", srv.URL)
	t.Setenv("SUPERVISOR_TOKEN", testToken)
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		<-arrived
		cancel()
	}()
	runContext(ctx, t, "", "computer", "exec", "--agent", "a1", "sleep", "100").
		want(t, exitInterrupted, "", "berth: interrupted; the command may still be running on the computer\n")
}

func TestAddSubcommand(t *testing.T) {
	saved := registrations
	t.Cleanup(func() { registrations = saved })
	registrations = append(append([]registration(nil), saved...), registration{parent: "agent", build: func() *cobra.Command {
		return &cobra.Command{Use: "hello", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Println("hi")
			return nil
		}}
	}})
	run(t, "", "agent", "hello").want(t, 0, "hi\n", "")
}

func TestFirstSignalCancels(t *testing.T) {
	ctx, stop := signalContext()
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-testContext(t).Done():
		t.Fatal("the first signal did not cancel the context")
	}
}

// TestServerRolesRefuseClientFlags checks that berth dev, supervisor and
// relay refuse --url, --token and --json, which they would ignore, before
// they start anything.
func TestServerRolesRefuseClientFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dev", "--token", "not-used"}, "--token is a client flag, which berth dev ignores: its secrets come from the environment"},
		{[]string{"supervisor", "--url", "http://127.0.0.1:1"}, "--url is a client flag, which berth supervisor ignores: --listen sets where it serves"},
		{[]string{"relay", "--json"}, "--json is a client flag, which berth relay ignores"},
	} {
		r := run(t, "", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("berth %s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, exitUsage, c.want)
		}
		if strings.Contains(r.stdout+r.stderr, "not-used") {
			t.Errorf("berth %s echoes the token: %s", strings.Join(c.args, " "), r.stderr)
		}
	}
}

// TestServerRoleDialErrorIsItsOwn: a supervisor that cannot reach its
// PostgreSQL says so, and is not told to look for a supervisor.
func TestServerRoleDialErrorIsItsOwn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	t.Setenv("DEFAULT_PROVIDER", "tunnel")
	t.Setenv("PROVIDERS", "")
	t.Setenv("SUPERVISOR_TOKEN", "a-token-of-twenty-chars")
	r := run(t, "", "supervisor", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--store", "postgres://berth@"+addr+"/berth")
	if r.code != exitFailure || !strings.Contains(r.stderr, "postgres") || strings.Contains(r.stderr, "cannot reach the supervisor") {
		t.Errorf("exit %d, stderr %q: want %d and the store's own error", r.code, r.stderr, exitFailure)
	}
}
