package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/httpjson"
)

// An interactive terminal: GET /v1/agents/{agent}/computer/terminal, a
// websocket, with the query parameters cols and rows (the terminal's size,
// default 80x24) and command (what to run, default the computer user's
// login shell).
//
// Refusals come before the upgrade, as an HTTP answer with the error
// envelope: 400 for a size or command out of range, 404 for an unknown
// agent, 409 no_session when the agent has no running computer, 409
// too_many_terminals past MaxTerminals.
//
// Once upgraded, binary messages carry the terminal's bytes as they are:
// from the client, what is typed; from the supervisor, what the terminal
// shows. Text messages carry one TerminalMessage each: from the client
// "resize" (Cols, Rows) and "eof" (end of input: the terminal's ^D); from
// the supervisor, last, "exit". Then the supervisor closes the websocket:
// with status 1000 when the command exited, 1001 when the session ended
// under the terminal (stopped, expired, slept, disconnected), 1011 when the
// link to the computer broke. The close reason repeats the exit message's
// code. Either side's messages are at most TerminalMessageBytes.
const (
	// MaxTerminals is how many terminals one session has open at once.
	MaxTerminals = 4
	// MaxTerminalCols and MaxTerminalRows bound a terminal's size.
	MaxTerminalCols = 1000
	MaxTerminalRows = 500
	// DefaultTerminalCols and DefaultTerminalRows are the size when the
	// query sets none.
	DefaultTerminalCols = 80
	DefaultTerminalRows = 24
	// MaxTerminalCommandBytes bounds the command query parameter.
	MaxTerminalCommandBytes = 8192
	// TerminalMessageBytes bounds one websocket message either way.
	TerminalMessageBytes = 64 << 10
)

// Error codes of a terminal.
const (
	// CodeTooManyTerminals refuses a terminal past MaxTerminals (409).
	CodeTooManyTerminals = "too_many_terminals"
	// CodeSessionEnded ends a terminal whose session ended under it.
	CodeSessionEnded = "session_ended"
	// CodeTerminalLost ends a terminal whose link to the computer broke;
	// what runs in it is then stopped.
	CodeTerminalLost = "terminal_lost"
)

// Close statuses of a terminal's websocket.
const (
	TerminalCloseExited       = int(websocket.StatusNormalClosure) // the command exited
	TerminalCloseSessionEnded = int(websocket.StatusGoingAway)     // the session ended
	TerminalCloseLost         = int(websocket.StatusInternalError) // the link to the computer broke
)

// TerminalMessage is a text message of a terminal's websocket. Types:
// "resize" (client: Cols, Rows), "eof" (client), "exit" (supervisor,
// last: ExitCode, and Code and Message when the terminal ended without
// its command's exit, ExitCode then -1).
type TerminalMessage struct {
	Type     string `json:"type"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	ExitCode int    `json:"exitCode"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// TerminalRequest opens a terminal. Zero sizes take the defaults; an empty
// Command runs the login shell.
type TerminalRequest struct {
	Cols    int
	Rows    int
	Command string
}

// Query returns r as the route's query parameters.
func (r TerminalRequest) Query() url.Values {
	q := url.Values{}
	if r.Cols != 0 {
		q.Set("cols", strconv.Itoa(r.Cols))
	}
	if r.Rows != 0 {
		q.Set("rows", strconv.Itoa(r.Rows))
	}
	if r.Command != "" {
		q.Set("command", r.Command)
	}
	return q
}

// TerminalExit is how a terminal ended.
type TerminalExit struct {
	// ExitCode is the command's exit code, -1 when it ended otherwise.
	ExitCode int
	// Code and Message say why a terminal ended without its command's
	// exit (CodeSessionEnded, CodeTerminalLost); empty otherwise.
	Code    string
	Message string
}

// Terminal opens an interactive terminal on the agent's computer. Its
// output is written to out (from one goroutine) as it arrives. The
// terminal lasts until its command exits, its session ends, ctx ends or
// Close is called. Refusals are *APIError.
func (c *Client) Terminal(ctx context.Context, agent string, r TerminalRequest, out io.Writer) (*TerminalConn, error) {
	if agent == "" || agent == "." || agent == ".." {
		return nil, ErrAgentID
	}
	u := c.base + "/v1/agents/" + url.PathEscape(agent) + "/computer/terminal"
	if q := r.Query().Encode(); q != "" {
		u += "?" + q
	}
	u = "ws" + strings.TrimPrefix(u, "http")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.token)
	h.Set("User-Agent", c.userAgent)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			if e, rerr := httpjson.ReadError(resp, maxErrorBytes); rerr == nil {
				return nil, decodeError(resp, e)
			}
			return nil, &APIError{Status: resp.StatusCode, Message: http.StatusText(resp.StatusCode)}
		}
		return nil, fmt.Errorf("client: terminal: %w", err)
	}
	conn.SetReadLimit(TerminalMessageBytes + 1024)
	t := &TerminalConn{ctx: ctx, conn: conn, out: out, done: make(chan struct{})}
	go t.read()
	return t, nil
}

// TerminalConn is an open terminal; see Client.Terminal. Its methods may
// be called concurrently.
type TerminalConn struct {
	ctx  context.Context
	conn *websocket.Conn
	out  io.Writer
	done chan struct{}

	mu   sync.Mutex // serialises writes, so a message is never split
	exit *TerminalMessage
	err  error
}

// Write sends p as typed input.
func (t *TerminalConn) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(p) {
		k := min(len(p)-n, TerminalMessageBytes)
		if err := t.conn.Write(t.ctx, websocket.MessageBinary, p[n:n+k]); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// Resize sets the terminal's size.
func (t *TerminalConn) Resize(cols, rows int) error {
	return t.send(TerminalMessage{Type: "resize", Cols: cols, Rows: rows})
}

// CloseInput ends the input: the terminal reads end-of-file (^D).
func (t *TerminalConn) CloseInput() error {
	return t.send(TerminalMessage{Type: "eof"})
}

func (t *TerminalConn) send(m TerminalMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn.Write(t.ctx, websocket.MessageText, b)
}

// Done is closed once the terminal has ended.
func (t *TerminalConn) Done() <-chan struct{} { return t.done }

// Wait waits for the terminal to end and says how. An error means the
// websocket broke before the supervisor said.
func (t *TerminalConn) Wait() (TerminalExit, error) {
	<-t.done
	if t.exit == nil {
		return TerminalExit{ExitCode: -1}, t.err
	}
	return TerminalExit{ExitCode: t.exit.ExitCode, Code: t.exit.Code, Message: t.exit.Message}, nil
}

// Close ends the terminal; what runs in it is stopped.
func (t *TerminalConn) Close() error {
	t.conn.Close(websocket.StatusNormalClosure, "closed by the client")
	t.conn.CloseNow()
	<-t.done
	return nil
}

func (t *TerminalConn) read() {
	defer close(t.done)
	defer t.conn.CloseNow()
	out := t.out
	for {
		typ, data, err := t.conn.Read(t.ctx)
		if err != nil {
			if t.exit == nil {
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					err = fmt.Errorf("client: terminal closed (%d %s) without an exit", ce.Code, ce.Reason)
				} else {
					err = fmt.Errorf("client: terminal: %w", err)
				}
				t.err = err
			}
			return
		}
		if typ == websocket.MessageText {
			var m TerminalMessage
			if json.Unmarshal(data, &m) == nil && m.Type == "exit" {
				t.exit = &m
			}
			continue
		}
		if out != nil {
			if _, err := out.Write(data); err != nil {
				out = nil
			}
		}
	}
}

// TerminalLink is the answer of POST
// /v1/agents/{agent}/computer/terminal/link: a page that opens a terminal
// in a browser. The link works once, before ExpiresAt.
type TerminalLink struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// TerminalLink asks for a link to a terminal page in a browser.
func (c *Client) TerminalLink(ctx context.Context, agent string) (*TerminalLink, error) {
	var out TerminalLink
	if err := c.agentCall(ctx, http.MethodPost, agent, "/terminal/link", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ViewRequest is the optional body of POST
// /v1/agents/{agent}/computer/view. With Terminal, the viewer page also
// opens a terminal on the computer beside the screen, through a one-time
// terminal link issued to the caller.
type ViewRequest struct {
	Terminal bool `json:"terminal,omitempty"`
}
