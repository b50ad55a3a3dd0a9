package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK does not hand a tool handler the JSON-RPC id of the call it
// serves. So the server reads each tools/call message on its way in (in the
// wrapped transport for stdio and in-memory connections, in the HTTP
// handler for streamable HTTP) and records the id, as a tag, in the call's
// _meta under tagKey, replacing whatever the client put there. The handler
// trusts a tag only when it carries this Server's random id, so a tag that a
// client wrote itself is ignored.

// tagKey is the _meta entry of a tagged tools/call.
const tagKey = "berth/call"

const methodCallTool = "tools/call"

// callTag identifies one tools/call message.
type callTag struct {
	Server string `json:"server"`         // the tagging Server's id
	Conn   string `json:"conn,omitempty"` // the connection's id, for transports without session ids
	ID     string `json:"id"`             // the JSON-RPC id, typed: "n:7" or "s:7"
}

// idString renders a JSON-RPC id so that the number 7 and the string "7"
// differ.
func idString(id jsonrpc.ID) (string, bool) {
	switch v := id.Raw().(type) {
	case int64:
		return "n:" + strconv.FormatInt(v, 10), true
	case string:
		return "s:" + v, true
	}
	return "", false
}

// tagMessage tags msg when it is a tools/call request. It reports whether
// it changed msg.
func (s *Server) tagMessage(msg jsonrpc.Message, conn string) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != methodCallTool || !req.IsCall() {
		return false
	}
	id, ok := idString(req.ID)
	if !ok {
		return false
	}
	params, err := withTag(req.Params, callTag{Server: s.id, Conn: conn, ID: id})
	if err != nil {
		// Not an object: the SDK refuses the call as it is.
		return false
	}
	req.Params = params
	return true
}

// withTag returns params with tag set in its _meta.
func withTag(params json.RawMessage, tag callTag) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(params)) > 0 && !bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
		if err := json.Unmarshal(params, &fields); err != nil {
			return nil, err
		}
		if fields == nil {
			fields = map[string]json.RawMessage{}
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
	}
	t, err := json.Marshal(tag)
	if err != nil {
		return nil, err
	}
	meta[tagKey] = t
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	fields["_meta"] = m
	return json.Marshal(fields)
}

// tagOf returns the tag of a call, when this Server set it.
func (s *Server) tagOf(meta mcp.Meta) (callTag, bool) {
	v, ok := meta[tagKey]
	if !ok {
		return callTag{}, false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return callTag{}, false
	}
	var t callTag
	if json.Unmarshal(raw, &t) != nil || t.Server != s.id || t.ID == "" {
		return callTag{}, false
	}
	return t, true
}

// callKey derives the Idempotency-Key of a tool call from the agent, the
// tool, the MCP session id, the connection id (for transports that have no
// session id) and the JSON-RPC id of the call. MCP forbids a client to reuse
// a request id within a session, so two calls share a key only when they
// are the same call sent again. It returns "" when the call's id is not
// known, or when neither a session nor a connection id scopes it; the
// client then uses a random key, which still covers its own retries.
func (s *Server) callKey(req *mcp.CallToolRequest) string {
	if req == nil || req.Params == nil {
		return ""
	}
	tag, ok := s.tagOf(req.Params.Meta)
	if !ok {
		return ""
	}
	var session string
	if req.Session != nil {
		session = req.Session.ID()
	}
	if session == "" && tag.Conn == "" {
		return ""
	}
	h := sha256.New()
	for _, part := range []string{"berth-mcp-call", s.agent, req.Params.Name, session, tag.Conn, tag.ID} {
		fmt.Fprintf(h, "%d:%s\n", len(part), part)
	}
	return "mcp-" + hex.EncodeToString(h.Sum(nil))
}

// taggingTransport is a transport whose connections tag every tools/call.
type taggingTransport struct {
	s *Server
	t mcp.Transport
}

func (t *taggingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &taggingConn{Connection: c, s: t.s, id: randomID(), calls: map[jsonrpc.ID]bool{}}, nil
}

// taggingConn tags the tools/call messages read from a connection, and
// counts them as pending until their answers are written. Wrapping hides
// the SDK's private session hooks from the connection it wraps; for the
// stdio transport that only means it does not learn the negotiated protocol
// version, and so accepts JSON-RPC batches that newer versions forbid.
type taggingConn struct {
	mcp.Connection
	s  *Server
	id string

	mu     sync.Mutex
	calls  map[jsonrpc.ID]bool // tools/call requests not answered yet
	closed bool
}

func (c *taggingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	conn := ""
	if c.Connection.SessionID() == "" {
		conn = c.id
	}
	if c.s.tagMessage(msg, conn) {
		id := msg.(*jsonrpc.Request).ID
		c.mu.Lock()
		if !c.closed && !c.calls[id] {
			c.calls[id] = true
			c.s.pending.add(1)
		}
		c.mu.Unlock()
	}
	return msg, nil
}

func (c *taggingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.calls[resp.ID] {
			delete(c.calls, resp.ID)
			c.s.pending.add(-1)
		}
		c.mu.Unlock()
	}
	return err
}

func (c *taggingConn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.s.pending.add(-len(c.calls))
		clear(c.calls)
	}
	c.mu.Unlock()
	return c.Connection.Close()
}

// tagRequests tags the tools/call messages of every POST before next
// handles it. The body is bounded as the SDK bounds it.
func (s *Server) tagRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, mcp.DefaultMaxRequestBodyBytes))
		r.Body.Close()
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "failed to read body", http.StatusBadRequest)
			return
		}
		tagged, ok := s.tagBody(body)
		if ok {
			// The POST ends when its calls are answered.
			body = tagged
			s.pending.add(1)
			defer s.pending.add(-1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// tagBody tags the tools/call messages of a POST body: one JSON-RPC message
// or, in older protocol versions, a batch of them. It reports false, and
// leaves the body to the SDK, when there was nothing to tag or the body is
// malformed.
func (s *Server) tagBody(body []byte) ([]byte, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, false
	}
	if trimmed[0] != '[' {
		msg, err := jsonrpc.DecodeMessage(trimmed)
		if err != nil || !s.tagMessage(msg, "") {
			return nil, false
		}
		out, err := jsonrpc.EncodeMessage(msg)
		return out, err == nil
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(trimmed, &batch); err != nil {
		return nil, false
	}
	changed := false
	for i, raw := range batch {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return nil, false
		}
		if !s.tagMessage(msg, "") {
			continue
		}
		if batch[i], err = jsonrpc.EncodeMessage(msg); err != nil {
			return nil, false
		}
		changed = true
	}
	if !changed {
		return nil, false
	}
	out, err := json.Marshal(batch)
	return out, err == nil
}
