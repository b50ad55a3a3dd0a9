package api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/api/apitest"
	"github.com/berthdev/berth/internal/testkit"
)

const testToken = "tok-123"

// testContext returns a context that ends before the test's deadline.
func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 30*time.Second)
}

// seen is one request as the fake supervisor received it.
type seen = apitest.Request

// fake is a scripted supervisor: it records requests and answers each,
// whatever its route, with the next scripted reply (the last one repeats;
// with none, 200 and {}).
type fake struct{ *apitest.Server }

type reply struct {
	status int
	body   string
	header map[string]string
	hangup bool // close the connection without answering
}

func newFake(t *testing.T, replies ...reply) *fake {
	t.Helper()
	f := &fake{apitest.New(t)}
	as := []apitest.Answer{{Status: http.StatusOK, Body: "{}"}}
	if len(replies) > 0 {
		as = as[:0]
		for _, r := range replies {
			as = append(as, apitest.Answer{Status: r.status, Body: r.body, Header: r.header, Drop: r.hangup})
		}
	}
	f.On(apitest.AnyRoute, as...)
	return f
}

func (f *fake) requests() []seen { return f.Requests() }

// newTestClient returns a client of f whose backoff waits are recorded
// instead of slept.
func newTestClient(t *testing.T, base string, opts ...Option) (*Client, *[]time.Duration) {
	t.Helper()
	c, err := New(base, testToken, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	return c, &waits
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("body %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("body = %s, want %s", gb, wb)
	}
}

func TestCalls(t *testing.T) {
	session := `{"id":"s1","state":"running","provider":"docker","image":"headless","startedAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:19:05Z","remainingSeconds":900}`
	tests := []struct {
		name   string
		call   func(context.Context, *Client) (any, error)
		answer string
		method string
		path   string
		query  string
		body   string // "" for none
		keyed  bool
		check  func(t *testing.T, v any)
	}{
		{
			name: "create agent",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateAgent(ctx, CreateAgentRequest{Name: "Ada", Workspace: "lab"})
			},
			answer: `{"id":"a1","name":"Ada","workspace":"lab","createdAt":"2025-01-02T03:04:05Z"}`,
			method: "POST", path: "/v1/agents", body: `{"name":"Ada","workspace":"lab"}`,
			check: func(t *testing.T, v any) {
				a := v.(*Agent)
				if a.ID != "a1" || a.Workspace != "lab" || !a.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
					t.Errorf("agent = %+v", a)
				}
			},
		},
		{
			name: "connect",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Connect(ctx, ConnectRequest{Agent: "a1", Provider: "e2b", Credentials: map[string]string{"apiKey": "k"}, LeaseSeconds: 600, Image: "desktop"})
			},
			answer: `{"agent":"a1","provider":"e2b","image":"desktop","leaseSeconds":600,"dailySeconds":3600,"createdAt":"2025-01-02T03:04:05Z"}`,
			method: "POST", path: "/v1/computers",
			body: `{"agent":"a1","provider":"e2b","credentials":{"apiKey":"k"},"leaseSeconds":600,"image":"desktop"}`,
			check: func(t *testing.T, v any) {
				if c := v.(*Connection); c.DailySeconds != 3600 || c.Image != "desktop" {
					t.Errorf("connection = %+v", c)
				}
			},
		},
		{
			name:   "status",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.Status(ctx, "a1") },
			answer: `{"connection":{"agent":"a1","provider":"docker"},"session":` + session + `,"budget":{"day":"2025-01-02","dailySeconds":3600,"usedSeconds":10,"reservedSeconds":900,"leftSeconds":2690,"resetsAt":"2025-01-03T00:00:00Z"}}`,
			method: "GET", path: "/v1/agents/a1/computer",
			check: func(t *testing.T, v any) {
				s := v.(*ComputerStatus)
				if s.Session == nil || s.Session.RemainingSeconds != 900 || s.Budget.LeftSeconds != 2690 || s.Connection.Provider != "docker" {
					t.Errorf("status = %+v", s)
				}
			},
		},
		{
			name:   "status without session",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.Status(ctx, "a1") },
			answer: `{"connection":{"agent":"a1"},"session":null,"budget":{}}`,
			method: "GET", path: "/v1/agents/a1/computer",
			check: func(t *testing.T, v any) {
				if s := v.(*ComputerStatus); s.Session != nil {
					t.Errorf("session = %+v, want nil", s.Session)
				}
			},
		},
		{
			name:   "disconnect",
			call:   func(ctx context.Context, c *Client) (any, error) { return nil, c.Disconnect(ctx, "a1") },
			answer: `{"agent":"a1","disconnected":true}`,
			method: "DELETE", path: "/v1/agents/a1/computer", keyed: true,
		},
		{
			name:   "start",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.Start(ctx, "a1") },
			answer: session,
			method: "POST", path: "/v1/agents/a1/computer/start", keyed: true,
			check: func(t *testing.T, v any) {
				if s := v.(*Session); s.ID != "s1" || s.State != StateRunning || s.ExpiresAt.IsZero() {
					t.Errorf("session = %+v", s)
				}
			},
		},
		{
			name: "exec",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Exec(ctx, "a1", ExecRequest{Command: "ls", TimeoutSeconds: 30})
			},
			answer: `{"exitCode":2,"stdout":"out","stderr":"err","truncated":true,"timedOut":false,"uncertain":false}`,
			method: "POST", path: "/v1/agents/a1/computer/exec", body: `{"command":"ls","timeoutSeconds":30}`, keyed: true,
			check: func(t *testing.T, v any) {
				if r := v.(*ExecResult); r.ExitCode != 2 || r.Stdout != "out" || r.Stderr != "err" || !r.Truncated {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name: "read file",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.ReadFile(ctx, "a1", ReadFileRequest{Path: "/etc/hosts", Offset: 5})
			},
			answer: `{"content":"abc","truncated":true,"nextOffset":8}`,
			method: "POST", path: "/v1/agents/a1/computer/read_file", body: `{"path":"/etc/hosts","offset":5}`, keyed: true,
			check: func(t *testing.T, v any) {
				if r := v.(*ReadFileResult); r.Content != "abc" || !r.Truncated || r.NextOffset != 8 {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name: "write file",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.WriteFile(ctx, "a1", WriteFileRequest{Path: "f.txt", Content: "hi"})
			},
			answer: `{"bytes":2,"sha256":"8f43"}`,
			method: "POST", path: "/v1/agents/a1/computer/write_file", body: `{"path":"f.txt","content":"hi"}`, keyed: true,
			check: func(t *testing.T, v any) {
				if r := v.(*WriteFileResult); r.Bytes != 2 || r.SHA256 != "8f43" {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name:   "stop",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.Stop(ctx, "a1") },
			answer: `{"id":"s1","state":"stopped"}`,
			method: "POST", path: "/v1/agents/a1/computer/stop", keyed: true,
			check: func(t *testing.T, v any) {
				if s := v.(*Session); s.State != StateStopped {
					t.Errorf("session = %+v", s)
				}
			},
		},
		{
			name:   "confirm cleanup",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ConfirmCleanup(ctx, "a1") },
			answer: `{"id":"s1","state":"stopped"}`,
			method: "POST", path: "/v1/agents/a1/computer/confirm-cleanup", body: `{"providerCleanupConfirmed":true}`, keyed: true,
			check: func(t *testing.T, v any) {
				if s := v.(*Session); s == nil || s.State != StateStopped {
					t.Errorf("session = %+v", s)
				}
			},
		},
		{
			name: "usage",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Usage(ctx, UsageRequest{By: ByWorkspace, From: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 2, 1, 1, 0, 0, 0, time.FixedZone("", 3600))})
			},
			answer: `{"by":"workspace","from":"2025-01-01T00:00:00Z","to":"2025-02-01T00:00:00Z","rows":[{"key":"lab","seconds":120,"sessions":2}]}`,
			method: "GET", path: "/v1/usage", query: "by=workspace&from=2025-01-01T00%3A00%3A00Z&to=2025-02-01T00%3A00%3A00Z",
			check: func(t *testing.T, v any) {
				if u := v.(*Usage); len(u.Rows) != 1 || u.Rows[0] != (UsageRow{Key: "lab", Seconds: 120, Sessions: 2}) {
					t.Errorf("usage = %+v", u)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, reply{status: http.StatusOK, body: tt.answer})
			c, _ := newTestClient(t, f.URL)
			v, err := tt.call(testContext(t), c)
			if err != nil {
				t.Fatal(err)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != tt.method || r.Path != tt.path || r.Query != tt.query {
				t.Errorf("request = %s %s?%s, want %s %s?%s", r.Method, r.Path, r.Query, tt.method, tt.path, tt.query)
			}
			if r.Auth != "Bearer "+testToken {
				t.Errorf("Authorization = %q", r.Auth)
			}
			if tt.keyed != (r.Key != "") {
				t.Errorf("Idempotency-Key = %q, keyed %v", r.Key, tt.keyed)
			}
			if tt.body == "" {
				if r.Body != "" {
					t.Errorf("body = %q, want none", r.Body)
				}
			} else {
				if r.ContentType != "application/json" {
					t.Errorf("Content-Type = %q", r.ContentType)
				}
				jsonEqual(t, r.Body, tt.body)
			}
			if tt.check != nil {
				tt.check(t, v)
			}
		})
	}
}

func TestHealthSendsNoToken(t *testing.T) {
	f := newFake(t, reply{status: http.StatusOK, body: `{"status":"ok"}`})
	c, _ := newTestClient(t, f.URL)
	if err := c.Health(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if r := f.requests()[0]; r.Path != "/healthz" || r.Auth != "" {
		t.Errorf("request = %+v", r)
	}
}

func TestBaseURLPrefixAndEscaping(t *testing.T) {
	f := newFake(t, reply{status: http.StatusOK, body: `{}`})
	c, _ := newTestClient(t, f.URL+"/berth/")
	if _, err := c.Status(testContext(t), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if r := f.requests()[0]; r.RawPath != "/berth/v1/agents/a%2Fb%20c/computer" {
		t.Errorf("path = %q", r.RawPath)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "http://u:p@h", "http://h?x=1"} {
		if _, err := New(u, ""); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestBadAgentID(t *testing.T) {
	f := newFake(t)
	c, _ := newTestClient(t, f.URL)
	for _, id := range []string{"", ".", ".."} {
		if _, err := c.Start(testContext(t), id); !errors.Is(err, ErrAgentID) {
			t.Errorf("Start(%q) = %v, want ErrAgentID", id, err)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests made", n)
	}
}

func TestAPIError(t *testing.T) {
	tests := []struct {
		name string
		rep  reply
		want APIError
		text string
	}{
		{
			name: "envelope",
			rep:  reply{status: http.StatusConflict, body: `{"error":{"code":"budget_exhausted","message":"daily budget has 10 s left"}}`},
			want: APIError{Status: 409, Code: "budget_exhausted", Message: "daily budget has 10 s left"},
			text: "daily budget has 10 s left (budget_exhausted)",
		},
		{
			name: "plain text",
			rep:  reply{status: http.StatusBadGateway, body: "upstream connect error\nmore", header: map[string]string{"Content-Type": "text/plain; charset=utf-8"}},
			want: APIError{Status: 502, Message: "upstream connect error"},
			text: "upstream connect error (HTTP 502)",
		},
		{
			name: "html page",
			rep:  reply{status: http.StatusForbidden, body: "<html><body>denied</body></html>", header: map[string]string{"Content-Type": "text/html"}},
			want: APIError{Status: 403},
			text: "Forbidden (HTTP 403)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, tt.rep)
			c, _ := newTestClient(t, f.URL)
			_, err := c.Start(testContext(t), "a1")
			var e *APIError
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if *e != tt.want {
				t.Errorf("APIError = %+v, want %+v", *e, tt.want)
			}
			if e.Error() != tt.text {
				t.Errorf("Error() = %q, want %q", e.Error(), tt.text)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestKeyReusedAcrossRetries(t *testing.T) {
	unavailable := reply{status: http.StatusServiceUnavailable, body: `{"error":{"code":"provider_unavailable","message":"try again"}}`}
	f := newFake(t, unavailable, reply{hangup: true}, reply{status: http.StatusOK, body: `{"exitCode":0,"stdout":"ok"}`})
	c, waits := newTestClient(t, f.URL)
	ctx := testContext(t)
	res, err := c.Exec(ctx, "a1", ExecRequest{Command: "touch x"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "ok" {
		t.Errorf("stdout = %q", res.Stdout)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	key := reqs[0].Key
	if key == "" {
		t.Fatal("no Idempotency-Key")
	}
	for i, r := range reqs {
		if r.Key != key {
			t.Errorf("attempt %d key = %q, want %q", i+1, r.Key, key)
		}
		jsonEqual(t, r.Body, `{"command":"touch x"}`)
	}
	// net/http itself may replay the request after the hang-up, as it does
	// for requests with an Idempotency-Key on a reused connection.
	if n := len(*waits); n < 1 || n > 2 {
		t.Errorf("waits = %v, want 1 or 2", *waits)
	}

	// The next logical call has a key of its own.
	if _, err := c.Exec(ctx, "a1", ExecRequest{Command: "touch x"}); err != nil {
		t.Fatal(err)
	}
	if next := f.requests()[3].Key; next == key || next == "" {
		t.Errorf("second call key = %q, first %q", next, key)
	}

	// A key from the context wins.
	if _, err := c.Exec(WithIdempotencyKey(ctx, "call-7"), "a1", ExecRequest{Command: "x"}); err != nil {
		t.Fatal(err)
	}
	if got := f.requests()[4].Key; got != "call-7" {
		t.Errorf("key = %q, want call-7", got)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	f := newFake(t, reply{status: http.StatusServiceUnavailable, body: `{"error":{"code":"provider_unavailable","message":"down"}}`})
	c, waits := newTestClient(t, f.URL, WithMaxAttempts(3), WithBackoff(100*time.Millisecond, 150*time.Millisecond))
	_, err := c.Start(testContext(t), "a1")
	var e *APIError
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "provider_unavailable" {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	if len(*waits) != 2 {
		t.Fatalf("waits = %v", *waits)
	}
	if w := (*waits)[0]; w < 50*time.Millisecond || w > 100*time.Millisecond {
		t.Errorf("first wait %v, want 50ms..100ms", w)
	}
	if w := (*waits)[1]; w < 75*time.Millisecond || w > 150*time.Millisecond {
		t.Errorf("second wait %v, want 75ms..150ms (capped)", w)
	}
}

func TestNoRetryWithOneAttempt(t *testing.T) {
	f := newFake(t, reply{status: http.StatusServiceUnavailable, body: `{}`})
	c, _ := newTestClient(t, f.URL, WithMaxAttempts(1))
	if _, err := c.Start(testContext(t), "a1"); err == nil {
		t.Fatal("no error")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestRetryAfter(t *testing.T) {
	f := newFake(t,
		reply{status: http.StatusServiceUnavailable, body: `{}`, header: map[string]string{"Retry-After": "3"}},
		reply{status: http.StatusOK, body: `{"id":"s1"}`})
	c, waits := newTestClient(t, f.URL)
	if _, err := c.Start(testContext(t), "a1"); err != nil {
		t.Fatal(err)
	}
	if len(*waits) != 1 || (*waits)[0] != 3*time.Second {
		t.Errorf("waits = %v, want [3s]", *waits)
	}

	// A wait longer than the client spends ends the retries.
	f = newFake(t, reply{status: http.StatusServiceUnavailable, body: `{}`, header: map[string]string{"Retry-After": "3600"}})
	c, _ = newTestClient(t, f.URL)
	if _, err := c.Start(testContext(t), "a1"); err == nil {
		t.Fatal("no error")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// A rate limit (429) is waited out as its Retry-After says, also for a
// call that is not safe to repeat: the supervisor refused it unread.
func TestRateLimitWaitedOut(t *testing.T) {
	f := newFake(t,
		reply{status: http.StatusTooManyRequests, body: `{"error":{"code":"rate_limited","message":"slow down"}}`, header: map[string]string{"Retry-After": "1"}},
		reply{status: http.StatusCreated, body: `{"id":"a1"}`})
	c, waits := newTestClient(t, f.URL)
	if _, err := c.CreateAgent(testContext(t), CreateAgentRequest{Name: "n"}); err != nil {
		t.Fatal(err)
	}
	if len(*waits) != 1 || (*waits)[0] != time.Second {
		t.Errorf("waits = %v, want [1s]", *waits)
	}
}

func TestUnsafeCallNotRepeatedAfterLostAnswer(t *testing.T) {
	f := newFake(t, reply{hangup: true}, reply{status: http.StatusCreated, body: `{"id":"a1"}`})
	c, _ := newTestClient(t, f.URL)
	if _, err := c.CreateAgent(testContext(t), CreateAgentRequest{Name: "n"}); err == nil {
		t.Fatal("no error after the lost answer")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1: creating an agent must not be repeated once it may have arrived", n)
	}
}

func TestUnsafeCallRepeatedWhenNeverSent(t *testing.T) {
	f := newFake(t, reply{status: http.StatusCreated, body: `{"id":"a1"}`})
	dials := 0
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		if dials == 1 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused")}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	c, _ := newTestClient(t, f.URL, WithHTTPClient(&http.Client{Transport: tr}))
	a, err := c.CreateAgent(testContext(t), CreateAgentRequest{Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != "a1" || len(f.requests()) != 1 {
		t.Errorf("agent %+v after %d requests", a, len(f.requests()))
	}
}

func TestDisconnectAfterLostAnswer(t *testing.T) {
	f := newFake(t, reply{hangup: true}, reply{status: http.StatusNotFound, body: `{"error":{"code":"not_found","message":"agent a1 has no connection"}}`})
	c, _ := newTestClient(t, f.URL)
	if err := c.Disconnect(testContext(t), "a1"); err != nil {
		t.Fatalf("err = %v: the lost first attempt disconnected", err)
	}
	// Without a lost attempt, the 404 stands.
	f = newFake(t, reply{status: http.StatusNotFound, body: `{"error":{"code":"not_found","message":"no connection"}}`})
	c, _ = newTestClient(t, f.URL)
	var e *APIError
	if err := c.Disconnect(testContext(t), "a1"); !errors.As(err, &e) || e.Status != 404 {
		t.Fatalf("err = %v, want 404", err)
	}
}

func TestContextEndsRetries(t *testing.T) {
	f := newFake(t, reply{status: http.StatusServiceUnavailable, body: `{}`})
	c, err := New(f.URL, testToken, WithMaxAttempts(10))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	c.sleep = func(ctx context.Context, d time.Duration) error {
		cancel()
		return ctx.Err()
	}
	_, err = c.Start(ctx, "a1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestDecodeFailure(t *testing.T) {
	f := newFake(t, reply{status: http.StatusOK, body: `{"exitCode":"zero"}`})
	c, _ := newTestClient(t, f.URL)
	_, err := c.Exec(testContext(t), "a1", ExecRequest{Command: "true"})
	if err == nil || !strings.Contains(err.Error(), "decode answer") {
		t.Fatalf("err = %v", err)
	}
}

func TestRawAnswer(t *testing.T) {
	answer := `{"id":"s1","state":"running","newField":42}`
	f := newFake(t, reply{status: http.StatusOK, body: answer + "\n"})
	c, _ := newTestClient(t, f.URL)
	var raw json.RawMessage
	s, err := c.Start(WithRawAnswer(testContext(t), &raw), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "s1" || string(raw) != answer {
		t.Errorf("session %+v, raw %q", s, raw)
	}
}
