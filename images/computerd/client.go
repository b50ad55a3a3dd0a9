package computerd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Client calls one computerd. It is safe for concurrent use.
//
// Errors: a request that computerd answered with an error returns an
// *APIError (see IsAPIError). Any other error (connection refused or
// reset, an answer cut short, an answer that is not computerd's, such as a
// proxy's 502) means the outcome is unknown: an exec may or may not have
// run. Transport errors are returned as net/http reports them, so
// errors.As finds the *url.Error and the net.Error inside.
type Client struct {
	base   string
	token  string
	hc     *http.Client
	header http.Header
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithTransport makes the client send its requests through rt.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) { c.hc = &http.Client{Transport: rt} }
}

// WithHeader adds h to every request, for providers whose gateway wants a
// header of its own. It never replaces the Authorization header.
func WithHeader(h http.Header) Option {
	return func(c *Client) {
		for k, vs := range h {
			for _, v := range vs {
				c.header.Add(k, v)
			}
		}
	}
}

// NewClient returns a client for the computerd at baseURL (such as
// "http://10.1.2.3:7070") that presents token.
func NewClient(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:   strings.TrimRight(baseURL, "/"),
		token:  token,
		hc:     http.DefaultClient,
		header: make(http.Header),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// APIError is an error answer from computerd.
type APIError struct {
	Status  int    // HTTP status; 0 for an error reported inside a stream
	Code    string // one of the Code constants
	Message string
}

// Error describes the answer.
func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("computerd: %s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("computerd: %s (%d %s)", e.Message, e.Status, e.Code)
}

// IsAPIError reports whether err holds an answer from computerd itself,
// as opposed to a failure to reach it or to hear its answer.
func IsAPIError(err error) bool {
	var ae *APIError
	return errors.As(err, &ae)
}

// Health returns computerd's health. It needs no token.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.call(ctx, http.MethodGet, "/healthz", nil, nil, &h)
}

// WaitHealthy polls computerd's health until it answers or ctx ends. It
// polls every 5 ms for the first two seconds (a daemon is usually up within
// tens of milliseconds of its container starting), then backs off to every
// 100 ms.
func (c *Client) WaitHealthy(ctx context.Context) error {
	wait, polls := 5*time.Millisecond, 0
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("computerd at %s: %w (last: %v)", c.base, ctx.Err(), err)
		case <-t.C:
		}
		if polls++; polls > 400 {
			wait = min(wait*2, 100*time.Millisecond)
		}
	}
}

// Exec runs a command and waits for its result. req.TimeoutMs is required.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	return res, c.call(ctx, http.MethodPost, "/v1/exec", nil, req, &res)
}

// Read returns up to limit characters of a UTF-8 file from the character
// offset (limit 0: DefaultReadChars).
func (c *Client) Read(ctx context.Context, path string, offset, limit int64) (ReadResult, error) {
	q := url.Values{"path": {path}}
	if offset != 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	var res ReadResult
	return res, c.call(ctx, http.MethodGet, "/v1/files/read", q, nil, &res)
}

// Write replaces a file atomically and reports what is on disk afterwards.
func (c *Client) Write(ctx context.Context, req WriteRequest) (WriteResult, error) {
	var res WriteResult
	return res, c.call(ctx, http.MethodPut, "/v1/files/write", nil, req, &res)
}

// Stat describes one file; a symbolic link is described, not followed.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	return fi, c.call(ctx, http.MethodGet, "/v1/files/stat", url.Values{"path": {path}}, nil, &fi)
}

// List lists a folder.
func (c *Client) List(ctx context.Context, path string) (ListResult, error) {
	var res ListResult
	return res, c.call(ctx, http.MethodGet, "/v1/files/list", url.Values{"path": {path}}, nil, &res)
}

// Upload streams r into a file, replacing it atomically and creating
// missing parent folders. A zero mode keeps an existing file's
// permissions, or gives a new one 0644.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, mode fs.FileMode) (WriteResult, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	resp, err := c.send(ctx, http.MethodPut, "/v1/files/upload", q, r, "application/octet-stream")
	if err != nil {
		return WriteResult{}, err
	}
	var res WriteResult
	return res, decodeAnswer(resp, &res)
}

// Download streams a file. The caller closes the reader; a read error
// from it means the file arrived incomplete.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/files/download", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Processes lists the computer's processes.
func (c *Client) Processes(ctx context.Context) ([]Process, error) {
	var ps []Process
	return ps, c.call(ctx, http.MethodGet, "/v1/processes", nil, nil, &ps)
}

// Kill signals a process, or its group.
func (c *Client) Kill(ctx context.Context, req KillRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/processes/kill", nil, req, nil)
}

// call sends a request with an optional JSON body and decodes the JSON
// answer into out (nil: no answer expected).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(in); err != nil {
			return fmt.Errorf("computerd %s %s: encode request: %w", method, path, err)
		}
		body, ctype = &buf, "application/json"
	}
	resp, err := c.send(ctx, method, path, q, body, ctype)
	if err != nil {
		return err
	}
	return decodeAnswer(resp, out)
}

// send sends a request and returns a successful answer; it turns an error
// answer into an error.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("computerd %s %s: %w", method, path, err)
	}
	c.setHeaders(req.Header)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, answerError(method, path, resp)
	}
	return resp, nil
}

func (c *Client) setHeaders(h http.Header) {
	for k, vs := range c.header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set("Authorization", "Bearer "+c.token)
}

// decodeAnswer decodes resp's JSON body into out and closes it.
func decodeAnswer(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("computerd %s %s: read answer: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	return nil
}

// answerError turns an error answer into an *APIError when it is
// computerd's, and into a plain error when it came from something else on
// the way (a proxy, a gateway) or could not be read whole.
func answerError(method, path string, resp *http.Response) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("computerd %s %s: %s, reading the answer: %w", method, path, resp.Status, err)
	}
	var eb ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		return &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	const maxQuote = 200
	if len(b) > maxQuote {
		b = b[:maxQuote]
	}
	return fmt.Errorf("computerd %s %s: unexpected answer %s: %q", method, path, resp.Status, b)
}

// ExecStream starts a command over a websocket. Its output is written to
// stdout and stderr (nil: dropped) as it arrives, from one goroutine; the
// writers should not block for long, as they hold back the stream. The
// command lives as long as ctx and the connection: cancelling ctx or
// calling Close kills it. Call Wait or Close to release the stream.
// The client's transport must support protocol upgrades, as net/http's does.
func (c *Client) ExecStream(ctx context.Context, start StreamStart, stdout, stderr io.Writer) (*Stream, error) {
	h := make(http.Header)
	c.setHeaders(h)
	conn, resp, err := websocket.Dial(ctx, c.base+"/v1/exec/stream", &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			var ae *APIError
			if errors.As(answerError(http.MethodGet, "/v1/exec/stream", resp), &ae) {
				return nil, ae
			}
		}
		return nil, err
	}
	conn.SetReadLimit(streamReadLimit)
	b, err := json.Marshal(start)
	if err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("computerd stream: encode start: %w", err)
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		conn.CloseNow()
		return nil, err
	}
	s := &Stream{ctx: ctx, conn: conn, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	go s.read()
	return s, nil
}

const (
	// streamReadLimit bounds one message from computerd.
	streamReadLimit = 1 << 20
	// streamFrameBytes is the largest stdin frame the client sends.
	streamFrameBytes = 32 << 10
)

// Stream is a command running over a websocket; see ExecStream. Its
// methods may be called concurrently, but concurrent Writes interleave.
type Stream struct {
	ctx            context.Context
	conn           *websocket.Conn
	stdout, stderr io.Writer
	done           chan struct{}
	exit           *StreamControl // the server's exit message, once received
	err            error          // why the stream ended without one
}

// Write sends p to the command's stdin.
func (s *Stream) Write(p []byte) (int, error) {
	frame := make([]byte, 0, 1+min(len(p), streamFrameBytes))
	n := 0
	for n < len(p) {
		k := min(len(p)-n, streamFrameBytes)
		frame = append(append(frame[:0], StreamStdin), p[n:n+k]...)
		if err := s.conn.Write(s.ctx, websocket.MessageBinary, frame); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// CloseStdin closes the command's stdin once the data written before it
// has been delivered.
func (s *Stream) CloseStdin() error {
	return s.control(StreamControl{Type: "close_stdin"})
}

// Resize sets the terminal size of a stream started with PTY.
func (s *Stream) Resize(cols, rows uint16) error {
	return s.control(StreamControl{Type: "resize", Cols: cols, Rows: rows})
}

// Signal sends a signal ("TERM", "INT", "KILL", "HUP", ...) to the
// command's process group.
func (s *Stream) Signal(sig string) error {
	return s.control(StreamControl{Type: "signal", Signal: sig})
}

func (s *Stream) control(m StreamControl) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return s.conn.Write(s.ctx, websocket.MessageText, b)
}

// Wait waits for the command to end and returns its exit code, and
// whether its timeout ended it (the code is then TimeoutExitCode). An
// *APIError means computerd refused to start the command; any other error
// means the stream broke and the command's fate is unknown.
func (s *Stream) Wait() (code int, timedOut bool, err error) {
	<-s.done
	switch {
	case s.exit == nil:
		return -1, false, s.err
	case s.exit.Error != "":
		return -1, false, &APIError{Code: s.exit.Code, Message: s.exit.Error}
	}
	return s.exit.ExitCode, s.exit.TimedOut, nil
}

// Close drops the stream; computerd then kills the command if it still
// runs.
func (s *Stream) Close() error {
	s.conn.CloseNow()
	<-s.done
	return nil
}

// read delivers the server's messages until the connection ends.
func (s *Stream) read() {
	defer close(s.done)
	defer s.conn.CloseNow()
	stdout, stderr := s.stdout, s.stderr
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			if s.exit == nil {
				s.err = fmt.Errorf("computerd stream: ended before the command's exit: %w", err)
			}
			return
		}
		if typ == websocket.MessageText {
			var m StreamControl
			if json.Unmarshal(data, &m) == nil && m.Type == "exit" {
				s.exit = &m
			}
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case StreamStdout:
			if stdout != nil {
				if _, err := stdout.Write(data[1:]); err != nil {
					stdout = nil
				}
			}
		case StreamStderr:
			if stderr != nil {
				if _, err := stderr.Write(data[1:]); err != nil {
					stderr = nil
				}
			}
		}
	}
}
