package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/internal/syncbuf"
)

// startMCP runs berth with args in the background; wait returns its exit
// code.
func startMCP(ctx context.Context, t *testing.T, stdin io.Reader, stdout, stderr io.Writer, args ...string) (wait func() int) {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- execute(ctx, args, stdin, stdout, stderr) }()
	return func() int {
		select {
		case code := <-done:
			return code
		case <-testContext(t).Done():
			t.Fatal("berth mcp did not end")
			return -1
		}
	}
}

func TestMCPStdio(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer", http.StatusOK, `{"connection":{"agent":"a1","provider":"docker"},"session":null,"budget":{}}`)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, runningSession)
	ctx := testContext(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr syncbuf.Buffer
	wait := startMCP(ctx, t, inR, outW, &stderr, "mcp", "--agent", "a1", "--log-level", "warn")

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 18 {
		t.Fatalf("tools: %v, %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_start"})
	if err != nil || res.IsError {
		t.Fatalf("start: %+v, %v", res, err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "Computer running: session s1") {
		t.Errorf("start text = %q", txt)
	}
	cs.Close() // closes berth's stdin: it ends

	if code := wait(); code != 0 {
		t.Errorf("exit code = %d, stderr %s", code, stderr.String())
	}
	if got := stderr.String(); got != "" {
		t.Errorf("stderr = %q", got)
	}
	calls := s.requests()
	if len(calls) != 2 || calls[1].Path != "/v1/agents/a1/computer/start" || !strings.HasPrefix(calls[1].Key, "mcp-") || calls[1].Auth != "Bearer "+testToken {
		t.Errorf("requests = %+v", calls)
	}
}

func TestMCPHTTP(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/exec", http.StatusOK, `{"exitCode":0,"stdout":"hi\n","stderr":"","truncated":false,"timedOut":false,"uncertain":false}`)
	t.Setenv("BERTH_MCP_TOKEN", "mcp-secret")
	t.Setenv("BERTH_AGENT", "a1")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	wait := startMCP(ctx, t, strings.NewReader(""), &stdout, &stderr, "mcp", "--http", "127.0.0.1:0")

	re := regexp.MustCompile(`berth mcp: serving agent a1 at (http://127\.0\.0\.1:\d+/mcp) \(clients must send the bearer token\)\n`)
	var url string
	for url == "" {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no URL printed: stdout %q, stderr %q", stdout.String(), stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}

	// Without the token: refused.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: status %d", resp.StatusCode)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer mcp-secret")
		return tr.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_exec", Arguments: map[string]any{"command": "echo hi"}})
	if err != nil || res.IsError {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; txt != "exit code: 0\n--- stdout ---\nhi\nstderr: (empty)" {
		t.Errorf("exec text = %q", txt)
	}
	cs.Close()
	tr.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()

	cancel() // as SIGTERM does
	if code := wait(); code != 0 {
		t.Errorf("exit code = %d, stderr %s", code, stderr.String())
	}
	last := s.requests()[len(s.requests())-1]
	if last.Path != "/v1/agents/a1/computer/exec" || !strings.HasPrefix(last.Key, "mcp-") {
		t.Errorf("request = %+v", last)
	}
	jsonEqual(t, last.Body, `{"command":"echo hi"}`)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestMCPUsageErrors(t *testing.T) {
	s := newSupervisor(t)
	t.Setenv("BERTH_MCP_TOKEN", "")
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"mcp"}, "no agent: pass --agent or set BERTH_AGENT"},
		{[]string{"mcp", "--agent", "a1", "--http", "0.0.0.0:0"}, "is not a loopback address: set BERTH_MCP_TOKEN (or --http-token)"},
		{[]string{"mcp", "--agent", "a1", "--http-token", "x"}, "--http-token needs --http"},
		{[]string{"mcp", "--agent", "a1", "--log-level", "loud"}, "--log-level"},
		{[]string{"mcp", "--agent", "a1", "extra"}, `unknown command "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := run(t, "", tt.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tt.msg) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, exitUsage, tt.msg)
			}
		})
	}
	for _, c := range s.requests() {
		if c.Method != http.MethodGet {
			t.Errorf("a refused command called the supervisor: %+v", c)
		}
	}

	t.Setenv("SUPERVISOR_TOKEN", "")
	if r := run(t, "", "mcp", "--agent", "a1"); r.code != exitUsage || !strings.Contains(r.stderr, "no operator token") {
		t.Errorf("%+v", r)
	}
}

func TestMCPWarnsAboutMissingConnection(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer", http.StatusNotFound, `{"error":{"code":"not_found","message":"agent a1 has no computer connection"}}`)
	r := run(t, "", "mcp", "--agent", "a1", "--log-level", "warn")
	if r.code != 0 || r.stdout != "" {
		t.Errorf("%+v", r)
	}
	if !strings.Contains(r.stderr, "berth: agent a1 has no computer connection yet") || !strings.Contains(r.stderr, "berth computer connect --agent a1") {
		t.Errorf("stderr = %q", r.stderr)
	}
}

// TestMCPStdioAnswersBeforeEOF writes every request at once and closes
// stdin, as `printf ... | berth mcp` does: each call is still answered.
func TestMCPStdioAnswersBeforeEOF(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer", http.StatusOK, `{"connection":{"agent":"a1","provider":"docker"},"session":null,"budget":{}}`)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, runningSession)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"computer_start","arguments":{}}}`,
	}, "\n") + "\n"
	var stdout, stderr syncbuf.Buffer
	wait := startMCP(testContext(t), t, strings.NewReader(in), &stdout, &stderr, "mcp", "--agent", "a1", "--log-level", "warn")
	if code := wait(); code != 0 {
		t.Fatalf("exit code = %d, stderr %s", code, stderr.String())
	}
	answers := map[float64]map[string]any{}
	dec := json.NewDecoder(strings.NewReader(stdout.String()))
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("stdout %q: %v", stdout.String(), err)
		}
		id, _ := m["id"].(float64)
		answers[id] = m
	}
	if len(answers) != 3 {
		t.Fatalf("answers = %v, want ids 1, 2 and 3; stderr %s", answers, stderr.String())
	}
	for id, m := range answers {
		if m["error"] != nil {
			t.Errorf("answer %v is an error: %v", id, m["error"])
		}
	}
	tools, _ := answers[2]["result"].(map[string]any)["tools"].([]any)
	if len(tools) != 18 {
		t.Errorf("tools/list = %v, want 18 tools", answers[2])
	}
	if got, _ := json.Marshal(answers[3]); !strings.Contains(string(got), "Computer running: session s1") {
		t.Errorf("computer_start = %s", got)
	}
}
