package mcpserver

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
)

const (
	runningSession = `{"id":"s1","state":"running","provider":"docker","image":"headless","startedAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:19:05Z","remainingSeconds":900}`
	stoppedSession = `{"id":"s1","state":"stopped","provider":"docker","image":"headless","startedAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:19:05Z","remainingSeconds":0}`
	computerPath   = "/v1/agents/" + testAgent + "/computer"
)

func TestLimitsMatchSupervisor(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, its int
	}{
		{"MaxExecTimeoutSeconds", MaxExecTimeoutSeconds, supervisor.MaxExecTimeoutSeconds},
		{"DefaultExecTimeoutSeconds", DefaultExecTimeoutSeconds, supervisor.DefaultExecTimeoutSeconds},
		{"MaxCommandChars", MaxCommandChars, supervisor.MaxCommandChars},
		{"ExecOutputBytes", ExecOutputBytes, supervisor.ExecOutputBytes},
		{"MaxReadChars", MaxReadChars, supervisor.MaxReadChars},
		{"MaxWriteChars", MaxWriteChars, supervisor.MaxWriteChars},
		{"MaxPathChars", MaxPathChars, supervisor.MaxPathChars},
	} {
		if c.ours != c.its {
			t.Errorf("%s = %d, the supervisor's is %d", c.name, c.ours, c.its)
		}
	}
}

func TestListTools(t *testing.T) {
	transports(t, func(t *testing.T, f *fakeSupervisor, cs *mcp.ClientSession) {
		res, err := cs.ListTools(testContext(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		tools := map[string]*mcp.Tool{}
		var names []string
		for _, tool := range res.Tools {
			tools[tool.Name] = tool
			names = append(names, tool.Name)
		}
		slices.Sort(names)
		want := []string{"browser_click", "browser_evaluate", "browser_navigate", "browser_press", "browser_screenshot",
			"browser_scroll", "browser_snapshot", "browser_tabs", "browser_type", "browser_wait_for",
			"computer_action", "computer_checkpoint", "computer_exec", "computer_read_file", "computer_screenshot", "computer_start", "computer_stop", "computer_write_file"}
		if !slices.Equal(names, want) {
			t.Fatalf("tools = %v, want %v", names, want)
		}
		mentions := map[string][]string{
			ToolStart: {"remainingSeconds", "survive between tool calls", "computer_stop", "persistent", "home folder",
				"Processes do not survive a sleep and wake", "10 minutes", "checkpoint", "computer_checkpoint", "refused while a session runs"},
			ToolExec:      {"120", "remaining time", "16384 bytes", "head and tail", "truncated", ">/tmp/cmd.log 2>&1 &", "uncertain", "never re-run automatically", "inspect the computer", "survive between calls", "idle sleep"},
			ToolReadFile:  {"24,000 characters", "truncated", "nextOffset", "offset"},
			ToolWriteFile: {"16,000 characters", "size and sha256"},
			ToolStop:      {"discard", "Every process", "every file is gone", "empty computer", "persistent", "home folder are archived", "processes do not survive that sleep and wake"},
			ToolCheckpoint: {"Only for a persistent computer", "keeps running", "home folder only", "no process", "computer_start with checkpoint",
				"1 to 64 characters", "letters, digits", "not be taken", "10 unless configured"},
		}
		for name, words := range mentions {
			for _, w := range words {
				if !strings.Contains(tools[name].Description, w) {
					t.Errorf("%s description does not mention %q: %s", name, w, tools[name].Description)
				}
			}
		}
		required := map[string][]string{
			ToolStart: nil, ToolStop: nil,
			ToolExec: {"command"}, ToolReadFile: {"path"}, ToolWriteFile: {"path", "content"}, ToolCheckpoint: {"name"},
		}
		for name, req := range required {
			var schema struct {
				Type       string                     `json:"type"`
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			}
			raw, _ := json.Marshal(tools[name].InputSchema)
			if err := json.Unmarshal(raw, &schema); err != nil {
				t.Fatal(err)
			}
			if schema.Type != "object" || !slices.Equal(schema.Required, req) {
				t.Errorf("%s input schema = %s", name, raw)
			}
			if tools[name].OutputSchema == nil {
				t.Errorf("%s has no output schema", name)
			}
		}
		raw, _ := json.Marshal(tools[ToolExec].InputSchema)
		if !strings.Contains(string(raw), `"type":"integer"}`) || !strings.Contains(string(raw), "1 to 120") {
			t.Errorf("exec input schema = %s", raw)
		}
		for _, name := range []string{ToolStart, ToolCheckpoint} {
			raw, _ := json.Marshal(tools[name].InputSchema)
			if !strings.Contains(string(raw), `"type":"string"}`) || !strings.Contains(string(raw), "1 to 64 characters") {
				t.Errorf("%s input schema = %s", name, raw)
			}
		}
		if a := tools[ToolCheckpoint].Annotations; a == nil || a.IdempotentHint || a.DestructiveHint == nil || *a.DestructiveHint || a.ReadOnlyHint {
			t.Errorf("checkpoint annotations = %+v", a)
		}
		if len(f.requests()) != 0 {
			t.Errorf("listing tools called the supervisor: %+v", f.requests())
		}
	})
}

func TestCallTools(t *testing.T) {
	transports(t, func(t *testing.T, f *fakeSupervisor, cs *mcp.ClientSession) {
		f.ok("POST "+computerPath+"/start", runningSession)
		f.ok("POST "+computerPath+"/exec", `{"exitCode":3,"stdout":"hello\n","stderr":"oops","truncated":false,"timedOut":false,"uncertain":false}`)
		f.ok("POST "+computerPath+"/read_file", `{"content":"line one\n","truncated":false}`)
		f.ok("POST "+computerPath+"/write_file", `{"bytes":5,"sha256":"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}`)
		f.ok("POST "+computerPath+"/stop", stoppedSession)

		res := callTool(t, cs, ToolStart, map[string]any{})
		if res.IsError || !strings.Contains(text(res), "Computer running: session s1 on docker, image headless. 900 s left, until 2025-01-02T03:19:05Z.") {
			t.Errorf("start: %s", text(res))
		}
		var x api.Session
		structured(t, res, &x)
		if x.ID != "s1" || x.State != "running" || x.RemainingSeconds != 900 {
			t.Errorf("start structured = %+v", x)
		}
		c := f.last(t)
		if c.Method != "POST" || c.Path != computerPath+"/start" || c.Body != "" || c.Auth != "Bearer "+testToken {
			t.Errorf("start request = %+v", c)
		}

		res = callTool(t, cs, ToolExec, map[string]any{"command": "echo hello; echo oops >&2; exit 3", "timeoutSeconds": 30})
		want := "exit code: 3\n--- stdout ---\nhello\n--- stderr ---\noops"
		if res.IsError || text(res) != want {
			t.Errorf("exec text = %q, want %q", text(res), want)
		}
		var e api.ExecResult
		structured(t, res, &e)
		if e.ExitCode != 3 || e.Stdout != "hello\n" || e.Stderr != "oops" {
			t.Errorf("exec structured = %+v", e)
		}
		jsonEqual(t, f.last(t).Body, `{"command":"echo hello; echo oops >&2; exit 3","timeoutSeconds":30}`)

		if res = callTool(t, cs, ToolExec, map[string]any{"command": "true"}); res.IsError {
			t.Errorf("exec true = %q", text(res))
		}
		jsonEqual(t, f.last(t).Body, `{"command":"true"}`)

		res = callTool(t, cs, ToolReadFile, map[string]any{"path": "notes.txt"})
		if res.IsError || text(res) != "line one\n" {
			t.Errorf("read text = %q", text(res))
		}
		var r api.ReadFileResult
		structured(t, res, &r)
		if r.Content != "line one\n" || r.Truncated {
			t.Errorf("read structured = %+v", r)
		}
		jsonEqual(t, f.last(t).Body, `{"path":"notes.txt"}`)

		res = callTool(t, cs, ToolWriteFile, map[string]any{"path": "/tmp/h.txt", "content": "hello"})
		if res.IsError || !strings.Contains(text(res), "Wrote /tmp/h.txt: 5 bytes, sha256 2cf24dba") || !strings.Contains(text(res), "verified") {
			t.Errorf("write text = %q", text(res))
		}
		var w api.WriteFileResult
		structured(t, res, &w)
		if w.Bytes != 5 || !strings.HasPrefix(w.SHA256, "2cf24dba") {
			t.Errorf("write structured = %+v", w)
		}
		jsonEqual(t, f.last(t).Body, `{"path":"/tmp/h.txt","content":"hello"}`)

		res = callTool(t, cs, ToolStop, nil)
		if res.IsError || !strings.Contains(text(res), "Session s1 is stopped: its processes are gone. A persistent computer keeps the files of its home folder") {
			t.Errorf("stop text = %q", text(res))
		}
		structured(t, res, &x)
		if x.State != "stopped" {
			t.Errorf("stop structured = %+v", x)
		}

		// Every call carried its own key, derived from the call.
		calls := f.requests()
		if len(calls) != 6 {
			t.Fatalf("%d requests, want 6: %+v", len(calls), calls)
		}
		keys := map[string]bool{}
		for _, c := range calls {
			if !strings.HasPrefix(c.Key, "mcp-") || len(c.Key) != 68 || keys[c.Key] {
				t.Errorf("Idempotency-Key %q of %s is not a fresh derived key", c.Key, c.Path)
			}
			keys[c.Key] = true
		}
	})
}

func TestReadTruncated(t *testing.T) {
	f := newFakeSupervisor(t)
	cs := connectInMemory(t, newTestServer(t, f))
	f.ok("POST "+computerPath+"/read_file", `{"content":"ééé","truncated":true,"nextOffset":103}`)
	res := callTool(t, cs, ToolReadFile, map[string]any{"path": "big.log", "offset": 100})
	if len(res.Content) != 2 || res.Content[0].(*mcp.TextContent).Text != "ééé" {
		t.Fatalf("content = %q", text(res))
	}
	note := res.Content[1].(*mcp.TextContent).Text
	if !strings.Contains(note, "[truncated]") || !strings.Contains(note, "3 characters from offset 100") || !strings.Contains(note, "offset 103") {
		t.Errorf("note = %q", note)
	}
	var r api.ReadFileResult
	structured(t, res, &r)
	if !r.Truncated || r.NextOffset != 103 {
		t.Errorf("structured = %+v", r)
	}
	jsonEqual(t, f.last(t).Body, `{"path":"big.log","offset":100}`)

	f.ok("POST "+computerPath+"/read_file", `{"content":"","truncated":false}`)
	res = callTool(t, cs, ToolReadFile, map[string]any{"path": "empty"})
	if res.IsError || !strings.Contains(text(res), "[empty] empty has no characters from offset 0") {
		t.Errorf("empty read = %q", text(res))
	}
}

func TestExecMarkers(t *testing.T) {
	f := newFakeSupervisor(t)
	cs := connectInMemory(t, newTestServer(t, f))

	f.ok("POST "+computerPath+"/exec", `{"exitCode":-1,"stdout":"head\n[... 5000 bytes cut ...]\ntail\n","stderr":"","truncated":true,"timedOut":true,"uncertain":false,"advice":"The command was stopped after 2m0s and its processes were killed."}`)
	res := callTool(t, cs, ToolExec, map[string]any{"command": "yes", "timeoutSeconds": 120})
	got := text(res)
	for _, w := range []string{"exit code: -1 [timed out]", "stopped after 2m0s", "[truncated]", "16384 bytes", "--- stdout ---\nhead\n", "stderr: (empty)"} {
		if !strings.Contains(got, w) {
			t.Errorf("text does not contain %q:\n%s", w, got)
		}
	}
	if res.IsError {
		t.Error("a timed-out command is a result, not an error")
	}

	f.ok("POST "+computerPath+"/exec", `{"exitCode":-1,"stdout":"","stderr":"","truncated":false,"timedOut":false,"uncertain":true,"advice":"`+supervisor.UncertainAdvice+`"}`)
	res = callTool(t, cs, ToolExec, map[string]any{"command": "rm -rf build"})
	got = text(res)
	if res.IsError || !strings.HasPrefix(got, "exit code: unknown [uncertain]\n") || !strings.Contains(got, supervisor.UncertainAdvice) || strings.Contains(got, "stdout") {
		t.Errorf("uncertain text = %q", got)
	}
	var e api.ExecResult
	structured(t, res, &e)
	if !e.Uncertain {
		t.Errorf("structured = %+v", e)
	}
}

func TestExecLostAnswerIsUncertain(t *testing.T) {
	f := newFakeSupervisor(t)
	cs := connectInMemory(t, newTestServer(t, f, api.WithMaxAttempts(2)))
	f.on("POST "+computerPath+"/exec", answer{drop: true})
	res := callTool(t, cs, ToolExec, map[string]any{"command": "make deploy"})
	got := text(res)
	if res.IsError || !strings.Contains(got, "[uncertain]") || !strings.Contains(got, "will not be re-run automatically") || !strings.Contains(got, "Inspect the computer") {
		t.Errorf("text = %q", got)
	}
	var e api.ExecResult
	structured(t, res, &e)
	if !e.Uncertain || e.ExitCode != -1 {
		t.Errorf("structured = %+v", e)
	}
	// The client's own retry sent the same key.
	calls := f.requests()
	if len(calls) != 2 || calls[0].Key == "" || calls[0].Key != calls[1].Key {
		t.Errorf("requests = %+v", calls)
	}
}

func TestSupervisorErrorIsToolError(t *testing.T) {
	transports(t, func(t *testing.T, f *fakeSupervisor, cs *mcp.ClientSession) {
		f.on("POST "+computerPath+"/exec", answer{status: http.StatusConflict, body: `{"error":{"code":"no_session","message":"agent \"a1\" has no running computer; call computer_start first"}}`})
		res := callTool(t, cs, ToolExec, map[string]any{"command": "ls"})
		want := `computer_exec failed: agent "a1" has no running computer; call computer_start first (code no_session, HTTP 409)`
		if !res.IsError || text(res) != want {
			t.Errorf("result = %v %q, want an error %q", res.IsError, text(res), want)
		}
		if res.StructuredContent != nil {
			t.Errorf("an error has structured content %v", res.StructuredContent)
		}
		f.on("POST "+computerPath+"/start", answer{status: http.StatusConflict, body: `{"error":{"code":"budget_exhausted","message":"daily budget: 30 s left today"}}`})
		res = callTool(t, cs, ToolStart, nil)
		if !res.IsError || !strings.Contains(text(res), "daily budget: 30 s left today (code budget_exhausted, HTTP 409)") {
			t.Errorf("start result = %v %q", res.IsError, text(res))
		}
	})
}

func TestUnreachableSupervisor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := api.New("http://"+addr, testToken, api.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	cs := connectInMemory(t, New(c, testAgent, WithLogger(testLogger(t))))
	res := callTool(t, cs, ToolExec, map[string]any{"command": "ls"})
	if !res.IsError || !strings.Contains(text(res), "cannot reach the supervisor") || !strings.Contains(text(res), "nothing was done") {
		t.Errorf("result = %v %q", res.IsError, text(res))
	}
}

func TestLimits(t *testing.T) {
	f := newFakeSupervisor(t)
	cs := connectInMemory(t, newTestServer(t, f))
	f.ok("POST "+computerPath+"/write_file", `{"bytes":32000,"sha256":"x"}`)
	tests := []struct {
		tool string
		args map[string]any
		want []string
	}{
		{ToolExec, map[string]any{"command": "sleep 200", "timeoutSeconds": 121}, []string{"timeoutSeconds: 121 is outside 1..120"}},
		{ToolExec, map[string]any{"command": "ls", "timeoutSeconds": 0}, []string{"timeoutSeconds: 0 is outside 1..120"}},
		{ToolExec, map[string]any{"command": "  "}, []string{"command: required"}},
		{ToolExec, map[string]any{"command": strings.Repeat("x", MaxCommandChars+1)}, []string{"command: 100001 characters, at most 100000"}},
		{ToolExec, map[string]any{"command": "ls", "timeout": 30}, []string{"timeout"}},
		{ToolExec, map[string]any{"timeoutSeconds": 5}, []string{"command"}},
		{ToolWriteFile, map[string]any{"path": "big.txt", "content": strings.Repeat("é", MaxWriteChars+1)}, []string{"content: 16001 characters, at most 16000"}},
		{ToolWriteFile, map[string]any{"path": "", "content": "x"}, []string{"path: required"}},
		{ToolReadFile, map[string]any{"path": "a", "offset": -1}, []string{"offset: -1 must not be negative"}},
		{ToolReadFile, map[string]any{"path": strings.Repeat("p", MaxPathChars+1)}, []string{"path: 4097 bytes, at most 4096"}},
		{ToolReadFile, map[string]any{"path": "a\x00b"}, []string{"path: contains a NUL"}},
	}
	for _, tt := range tests {
		res := callTool(t, cs, tt.tool, tt.args)
		got := text(res)
		if len(got) > 300 {
			t.Errorf("%s: the error quotes its input: %d bytes", tt.tool, len(got))
		}
		if !res.IsError {
			t.Errorf("%s %v: not an error: %q", tt.tool, tt.args["timeoutSeconds"], got)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: error %q does not contain %q", tt.tool, got, w)
			}
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests reached the supervisor for refused calls", n)
	}

	// At the limit (16,000 characters, 32,000 bytes) the call goes through,
	// and the answer is checked against what was sent.
	res := callTool(t, cs, ToolWriteFile, map[string]any{"path": "big.txt", "content": strings.Repeat("é", MaxWriteChars)})
	if !res.IsError || !strings.Contains(text(res), "could not be verified") {
		t.Errorf("a mismatched checksum was not reported: %v %q", res.IsError, text(res))
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestHTTPAuth(t *testing.T) {
	f := newFakeSupervisor(t)
	h := serveHTTP(t, newTestServer(t, f), mcpToken)
	post := func(auth string) int {
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, h.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic " + mcpToken, "Bearer " + mcpToken + "x"} {
		if code := post(auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, code)
		}
	}
	if code := post("Bearer " + mcpToken); code == http.StatusUnauthorized {
		t.Error("the right token was refused")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestHTTPWithoutTokenOnLoopback(t *testing.T) {
	f := newFakeSupervisor(t)
	f.ok("POST "+computerPath+"/start", runningSession)
	cs := connectHTTP(t, serveHTTP(t, newTestServer(t, f), ""))
	if res := callTool(t, cs, ToolStart, nil); res.IsError {
		t.Errorf("start: %q", text(res))
	}
}

// addrListener is a listener that claims an address and accepts nothing.
type addrListener struct {
	net.Listener
	addr   net.Addr
	closed bool
}

func (l *addrListener) Addr() net.Addr { return l.addr }
func (l *addrListener) Close() error   { l.closed = true; return nil }

func TestServeRefusesOpenAddressWithoutToken(t *testing.T) {
	f := newFakeSupervisor(t)
	s := newTestServer(t, f)
	for _, ip := range []string{"0.0.0.0", "192.0.2.10", "::"} {
		ln := &addrListener{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 7331}}
		if err := s.Serve(testContext(t), ln, ""); !errors.Is(err, ErrNoToken) {
			t.Errorf("%s: Serve = %v, want ErrNoToken", ip, err)
		}
		if !ln.closed {
			t.Errorf("%s: the listener was left open", ip)
		}
	}
}
