package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const execAnswer = `{"exitCode":0,"stdout":"ok\n","stderr":"","truncated":false,"timedOut":false,"uncertain":false}`

// rawConn speaks JSON-RPC to a server directly, so that a test can choose
// the ids of its calls and send one again.
type rawConn struct {
	t    *testing.T
	conn mcp.Connection
}

func dialRaw(t *testing.T, tr mcp.Transport) *rawConn {
	t.Helper()
	conn, err := tr.Connect(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	c := &rawConn{t, conn}
	c.call(jsonrpc.ID{}, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	if err := conn.Write(testContext(t), &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	return c
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// call sends a request (with id 0 when id is not valid) and returns its
// result.
func (c *rawConn) call(id jsonrpc.ID, method, params string) json.RawMessage {
	c.t.Helper()
	if !id.IsValid() {
		id = mustID(c.t, float64(0))
	}
	ctx := testContext(c.t)
	if err := c.conn.Write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: json.RawMessage(params)}); err != nil {
		c.t.Fatal(err)
	}
	for {
		msg, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatal(err)
		}
		if resp, ok := msg.(*jsonrpc.Response); ok && resp.ID == id {
			if resp.Error != nil {
				c.t.Fatalf("%s: %v", method, resp.Error)
			}
			return resp.Result
		}
	}
}

func (c *rawConn) exec(id jsonrpc.ID, params string) {
	c.t.Helper()
	res := c.call(id, "tools/call", params)
	if !bytes.Contains(res, []byte("exit code: 0")) {
		c.t.Errorf("result = %s", res)
	}
}

// serveRaw runs s over an in-memory transport and returns a raw
// connection to it.
func serveRaw(t *testing.T, s *Server) *rawConn {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	runCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx, st) }()
	c := dialRaw(t, ct)
	t.Cleanup(func() {
		c.conn.Close()
		cancel()
		<-ran
	})
	return c
}

func keys(f *fakeSupervisor) []string {
	var out []string
	for _, c := range f.requests() {
		out = append(out, c.Key)
	}
	return out
}

func TestKeysFollowCallIDsInMemory(t *testing.T) {
	f := newFakeSupervisor(t)
	f.ok("POST "+computerPath+"/exec", execAnswer)
	s := newTestServer(t, f)
	a := serveRaw(t, s)
	const call = `{"name":"computer_exec","arguments":{"command":"echo ok"}}`
	a.exec(mustID(t, float64(7)), call)
	a.exec(mustID(t, float64(7)), call) // the same call, sent again
	a.exec(mustID(t, float64(8)), call)
	a.exec(mustID(t, "7"), call)
	// A client-written tag is replaced by the server's own.
	a.exec(mustID(t, float64(7)), `{"name":"computer_exec","arguments":{"command":"echo ok"},"_meta":{"berth/call":{"server":"forged","id":"n:1"},"other":1}}`)
	b := serveRaw(t, s) // another connection reuses the ids
	b.exec(mustID(t, float64(7)), call)

	k := keys(f)
	if len(k) != 6 {
		t.Fatalf("keys = %v", k)
	}
	for i, key := range k {
		if !strings.HasPrefix(key, "mcp-") {
			t.Errorf("key %d = %q", i, key)
		}
	}
	if k[0] != k[1] || k[0] != k[4] {
		t.Errorf("the same call got different keys: %v", k)
	}
	distinct := map[string]bool{k[0]: true, k[2]: true, k[3]: true, k[5]: true}
	if len(distinct) != 4 {
		t.Errorf("different calls share a key: id 7 %s, id 8 %s, id \"7\" %s, other connection %s", k[0], k[2], k[3], k[5])
	}
}

func TestKeysFollowCallIDsOverHTTP(t *testing.T) {
	f := newFakeSupervisor(t)
	f.ok("POST "+computerPath+"/exec", execAnswer)
	f.ok("POST "+computerPath+"/stop", stoppedSession)
	h := serveHTTP(t, newTestServer(t, f), mcpToken)
	one, two := connectHTTP(t, h), connectHTTP(t, h)

	post := func(cs *mcp.ClientSession, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, h.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(`"result"`)) {
			t.Fatalf("POST %s: %d %s", body, resp.StatusCode, data)
		}
	}
	const exec7 = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"computer_exec","arguments":{"command":"echo ok"}}}`
	post(one, exec7)
	post(one, exec7)
	post(one, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"computer_exec","arguments":{"command":"echo ok"}}}`)
	post(two, exec7)
	post(one, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"computer_stop"}}`)

	k := keys(f)
	if len(k) != 5 {
		t.Fatalf("keys = %v", k)
	}
	if k[0] != k[1] || !strings.HasPrefix(k[0], "mcp-") {
		t.Errorf("the same call got different keys: %v", k)
	}
	distinct := map[string]bool{k[0]: true, k[2]: true, k[3]: true, k[4]: true}
	if len(distinct) != 4 {
		t.Errorf("different calls share a key: %v", k)
	}
}

func TestTagBodyBatch(t *testing.T) {
	s := New(nil, testAgent)
	body := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"computer_stop"}},{"jsonrpc":"2.0","id":2,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`
	out, ok := s.tagBody([]byte(body))
	if !ok {
		t.Fatal("nothing tagged")
	}
	var msgs []map[string]any
	if err := json.Unmarshal(out, &msgs); err != nil || len(msgs) != 3 {
		t.Fatalf("batch = %s (%v)", out, err)
	}
	meta := msgs[0]["params"].(map[string]any)["_meta"].(map[string]any)[tagKey].(map[string]any)
	if meta["server"] != s.id || meta["id"] != "n:1" {
		t.Errorf("tag = %v", meta)
	}
	if _, ok := msgs[1]["params"]; ok {
		t.Errorf("tools/list was changed: %v", msgs[1])
	}
	for _, b := range []string{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `not json`, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`} {
		if _, ok := s.tagBody([]byte(b)); ok {
			t.Errorf("%s was tagged", b)
		}
	}
}

func TestUntaggedCallsGetRandomKeys(t *testing.T) {
	f := newFakeSupervisor(t)
	f.ok("POST "+computerPath+"/exec", execAnswer)
	s := newTestServer(t, f)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(testContext(t), st, nil) // not through s.Transport
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(testContext(t), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callTool(t, cs, ToolExec, map[string]any{"command": "true"})
	callTool(t, cs, ToolExec, map[string]any{"command": "true"})
	k := keys(f)
	if len(k) != 2 || k[0] == "" || k[0] == k[1] || strings.HasPrefix(k[0], "mcp-") {
		t.Errorf("keys = %v", k)
	}
}

// shutdownWhileRunning starts an exec that the supervisor holds, calls
// shutdown once the supervisor has it, then lets the supervisor answer. The
// call must still get its result.
func shutdownWhileRunning(t *testing.T, f *fakeSupervisor, cs *mcp.ClientSession, shutdown func()) {
	t.Helper()
	held, hold := make(chan struct{}), make(chan struct{})
	f.on("POST "+computerPath+"/exec", answer{status: 200, body: execAnswer, held: held, hold: hold})
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: ToolExec, Arguments: map[string]any{"command": "sleep 1"}})
		done <- outcome{res, err}
	}()
	select {
	case <-held:
	case <-testContext(t).Done():
		t.Fatal("the exec did not reach the supervisor")
	}
	stopped := make(chan struct{})
	go func() {
		shutdown()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("shutdown did not wait for the running call")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	o := <-done
	if o.err != nil || o.res.IsError || !strings.Contains(text(o.res), "exit code: 0") {
		t.Errorf("the running call got %v, %+v", o.err, o.res)
	}
	select {
	case <-stopped:
	case <-testContext(t).Done():
		t.Fatal("shutdown did not end")
	}
}

func TestRunDrainsOnCancel(t *testing.T) {
	f := newFakeSupervisor(t)
	s := newTestServer(t, f)
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(testContext(t), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	shutdownWhileRunning(t, f, cs, func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func TestServeDrainsOnCancel(t *testing.T) {
	f := newFakeSupervisor(t)
	h := serveHTTP(t, newTestServer(t, f), mcpToken)
	cs := connectHTTP(t, h)
	shutdownWhileRunning(t, f, cs, func() {
		if err := h.stop(); err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
}

func TestServeShutdownTimeout(t *testing.T) {
	f := newFakeSupervisor(t)
	c := newTestServer(t, f).c
	s := New(c, testAgent, WithLogger(testLogger(t)), WithShutdownTimeout(50*time.Millisecond))
	h := serveHTTP(t, s, mcpToken)
	cs := connectHTTP(t, h)
	held, hold := make(chan struct{}), make(chan struct{})
	defer close(hold)
	f.on("POST "+computerPath+"/exec", answer{status: 200, body: execAnswer, held: held, hold: hold})
	go cs.CallTool(testContext(t), &mcp.CallToolParams{Name: ToolExec, Arguments: map[string]any{"command": "sleep 100"}})
	<-held
	if err := h.stop(); !errors.Is(err, ErrShutdownTimeout) {
		t.Errorf("Serve = %v, want ErrShutdownTimeout", err)
	}
}
