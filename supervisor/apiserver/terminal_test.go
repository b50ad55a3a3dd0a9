package apiserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/testkit"
)

// screen collects a terminal's output.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// await waits for want to show after the first from bytes, and returns
// the length of the output up to the end of it.
func (s *screen) await(t *testing.T, from int, want string) int {
	t.Helper()
	var at int
	ok := testkit.Poll(20*time.Second, func() bool {
		out := s.String()
		if i := strings.Index(out[from:], want); i >= 0 {
			at = from + i + len(want)
			return true
		}
		return false
	})
	if !ok {
		t.Fatalf("terminal never showed %q; it showed:\n%s", want, s.String())
	}
	return at
}

func (e *env) client() *api.Client {
	e.t.Helper()
	c, err := api.New(e.srv.URL, e.bearer, api.WithMaxAttempts(1))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func TestTerminal(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	ctx := testkit.Context(t)
	c := e.client()

	var out screen
	term, err := c.Terminal(ctx, "a1", api.TerminalRequest{Cols: 100, Rows: 30}, &out)
	if err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size\n"))
	at := out.await(t, 0, "30 100")
	if err := term.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size\n"))
	out.await(t, at, "40 120")
	term.Write([]byte("exit 3\n"))
	exit, err := term.Wait()
	if err != nil || exit.ExitCode != 3 || exit.Code != "" {
		t.Fatalf("exit = %+v, %v; want 3", exit, err)
	}

	// A command of the request's own, at the default size.
	out = screen{}
	term, err = c.Terminal(ctx, "a1", api.TerminalRequest{Command: "stty size; exit 5"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := term.Wait(); err != nil || exit.ExitCode != 5 {
		t.Fatalf("exit = %+v, %v; want 5", exit, err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%d %d", api.DefaultTerminalRows, api.DefaultTerminalCols)) {
		t.Fatalf("default size: %q", out.String())
	}
}

func TestTerminalsPerSessionAndSessionEnd(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	ctx := testkit.Context(t)
	c := e.client()

	var open []*api.TerminalConn
	for range api.MaxTerminals {
		s := &screen{}
		term, err := c.Terminal(ctx, "a1", api.TerminalRequest{}, s)
		if err != nil {
			t.Fatal(err)
		}
		term.Write([]byte("echo ready-$((40+2))\n"))
		s.await(t, 0, "ready-42")
		open = append(open, term)
	}
	_, err := c.Terminal(ctx, "a1", api.TerminalRequest{}, nil)
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeTooManyTerminals {
		t.Fatalf("terminal %d: %v, want 409 %s", api.MaxTerminals+1, err, api.CodeTooManyTerminals)
	}
	if !strings.Contains(ae.Message, fmt.Sprint(api.MaxTerminals)) {
		t.Fatalf("message does not name the limit: %q", ae.Message)
	}
	// Closing one makes room.
	open[0].Close()
	testkit.Eventually(t, 10*time.Second, "the closed terminal to be counted out", func() bool {
		term, err := c.Terminal(ctx, "a1", api.TerminalRequest{}, nil)
		if err != nil {
			return false
		}
		open[0] = term
		return true
	})

	// Stopping the session ends every terminal with a clear reason.
	e.mustCall("POST", "/v1/agents/a1/computer/stop", nil, 200, nil)
	for i, term := range open {
		exit, err := term.Wait()
		if err != nil || exit.ExitCode != -1 || exit.Code != api.CodeSessionEnded || !strings.Contains(exit.Message, "stopped") {
			t.Fatalf("terminal %d after stop: %+v, %v", i, exit, err)
		}
	}
	if _, err := c.Terminal(ctx, "a1", api.TerminalRequest{}, nil); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "no_session" {
		t.Fatalf("terminal after stop: %v", err)
	}
}

func TestTerminalEndsAtExpiry(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	ctx := testkit.Context(t)
	s := &screen{}
	term, err := e.client().Terminal(ctx, "a1", api.TerminalRequest{}, s)
	if err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("echo up\n"))
	s.await(t, 0, "up")
	e.clock.Advance(301 * time.Second)
	exit, err := term.Wait()
	if err != nil || exit.Code != api.CodeSessionEnded || !strings.Contains(exit.Message, "expired") {
		t.Fatalf("after expiry: %+v, %v", exit, err)
	}
}

func TestTerminalBadInput(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	ctx := testkit.Context(t)
	c := e.client()
	cases := []struct {
		agent  string
		req    api.TerminalRequest
		status int
		code   string
		says   []string
	}{
		{"nobody", api.TerminalRequest{}, 404, "not_found", []string{"nobody"}},
		{"a1", api.TerminalRequest{}, 409, "no_session", []string{"no running computer"}},
		{"a1", api.TerminalRequest{Cols: 5000}, 400, "bad_request", []string{"cols", "1..1000"}},
		{"a1", api.TerminalRequest{Rows: -1}, 400, "bad_request", []string{"rows", "1..500"}},
		{"a1", api.TerminalRequest{Command: strings.Repeat("x", api.MaxTerminalCommandBytes+1)}, 400, "bad_request", []string{"command", "8192"}},
	}
	for _, tc := range cases {
		_, err := c.Terminal(ctx, tc.agent, tc.req, nil)
		var ae *api.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
			t.Errorf("%s %+v: %v, want %d %s", tc.agent, tc.req.Cols, err, tc.status, tc.code)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(ae.Message, s) {
				t.Errorf("%s: message %q does not say %q", tc.agent, ae.Message, s)
			}
		}
	}
	// A plain GET, no websocket.
	req, _ := http.NewRequestWithContext(context.Background(), "GET", e.srv.URL+"/v1/agents/a1/computer/terminal", nil)
	req.Header.Set("Authorization", "Bearer "+opToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("plain GET: %d", resp.StatusCode)
	}
	// No token.
	if _, err := (func() (*api.TerminalConn, error) {
		c, _ := api.New(e.srv.URL, "", api.WithMaxAttempts(1))
		return c.Terminal(ctx, "a1", api.TerminalRequest{}, nil)
	})(); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("no token: %v", err)
	}
}

// TestTerminalInputKeepsAwake: typing in a terminal counts as a tool call
// for a persistent computer's idle sleep; once it sleeps, the terminal
// ends saying so.
func TestTerminalInputKeepsAwake(t *testing.T) {
	e := newHomeEnv(t)
	e.connectHome("idle", map[string]any{"idleSleepSeconds": 120})
	e.mustCall("POST", "/v1/agents/idle/computer/start", nil, 200, nil)
	ctx := testkit.Context(t)
	s := &screen{}
	term, err := e.client().Terminal(ctx, "idle", api.TerminalRequest{}, s)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(100 * time.Second)
	term.Write([]byte("echo typed-$((2*3))\n"))
	s.await(t, 0, "typed-6") // the input was taken, so it counted
	e.clock.Advance(100 * time.Second)
	e.svc.Reap(context.Background())
	if st := e.status("idle"); st.State != "running" {
		t.Fatalf("state 200 s in, 100 s after typing = %q, want running", st.State)
	}
	e.clock.Advance(21 * time.Second)
	e.svc.Reap(context.Background())
	if st := e.status("idle"); st.State != api.StateSleeping {
		t.Fatalf("state 121 s after typing = %q, want sleeping", st.State)
	}
	exit, err := term.Wait()
	if err != nil || exit.Code != api.CodeSessionEnded || !strings.Contains(exit.Message, "sleep") {
		t.Fatalf("terminal after the sleep: %+v, %v", exit, err)
	}
}
