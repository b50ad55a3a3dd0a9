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
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/httpjson"
)

// Client calls one computerd. It is safe for concurrent use.
//
// Errors: a request that computerd answered with an error returns an
// *APIError (see IsAPIError). Any other error (connection refused or
// reset, an answer cut short, an answer that is not computerd's, such as a
// proxy's 502) means the outcome is unknown: an exec may or may not have
// run. Transport errors are returned as net/http reports them, so
// errors.As finds the *url.Error and the net.Error inside.
//
// Bounded answers: the client reads at most a fixed number of bytes of each
// answer, derived from the call's own bounds, and fails a call whose answer
// is larger with an error wrapping ErrAnswerTooLarge (nothing past the
// limit is read or kept):
//
//   - Exec: 2 × 6 × the request's MaxOutputBytes per stream (0:
//     DefaultOutputBytes) + 64 KiB. computerd keeps at most that many bytes
//     of each stream; JSON may escape each byte to 6 (\u0000, \u003c).
//   - Read: 6 × the limit in characters (0: DefaultReadChars) + 64 KiB.
//   - List and Processes: 16 MiB (MaxListEntries entries with long paths).
//   - Health, Stat, Write, Upload, Restore, Bind, Kill: 1 MiB.
//   - An error answer: its first 64 KiB.
//
// Download, Archive and ExecStream are streams: their data is not bounded
// here, and the caller bounds what it reads from them (ExecStream's
// messages are bounded one by one).
//
// Deadlines: a call whose context has a deadline keeps it. A call whose
// context has none gets one from the client, so that a computerd that
// accepts a request and never answers cannot hold it forever: an Exec
// gets its own TimeoutMs plus the exec margin (DefaultExecMargin), every
// other call the call timeout (DefaultCallTimeout). For Upload, Restore
// and Archive the call timeout is a limit on silence: it restarts whenever
// computerd takes more of the upload or the archive (Restore), or sends
// more of it (Archive). For Download and ExecStream it bounds the wait
// for the answer to begin; the stream then lives as long as the caller's
// context. A call ended so returns an error that says so and wraps
// context.DeadlineExceeded.
type Client struct {
	base   string
	token  string
	hc     *http.Client
	header http.Header

	callTimeout time.Duration
	execMargin  time.Duration
}

// Default deadlines, for calls whose context has none.
const (
	// DefaultCallTimeout bounds every call but an exec.
	DefaultCallTimeout = 60 * time.Second
	// DefaultExecMargin is what an exec gets beyond its own timeout:
	// computerd's kill and output grace, and a slow link or relay.
	DefaultExecMargin = 30 * time.Second
)

// Answer limits; see Client.
const (
	// jsonEscapeBytes is the most bytes JSON spends on one byte or
	// character of text: "\u0000" for a control character, "\u003c" for
	// an escaped '<', "\u2028" for a 3-byte line separator.
	jsonEscapeBytes = 6
	// answerMargin covers an answer's fields beside its bounded text
	// (a path of up to 4 KiB, escaped; truncation markers; numbers).
	answerMargin = 64 << 10
	// controlAnswerBytes bounds an answer of one small object.
	controlAnswerBytes = 1 << 20
	// listAnswerBytes bounds a folder listing (at most MaxListEntries
	// entries, each a name of up to 255 bytes and its path) and the
	// process list (command lines of up to 4 KiB each).
	listAnswerBytes = 16 << 20
	// errorAnswerBytes bounds what is read of an error answer.
	errorAnswerBytes = 64 << 10
)

// execAnswerBytes bounds the answer to an exec whose streams are each
// limited to perStream bytes (0: computerd's default).
func execAnswerBytes(perStream int) int64 {
	if perStream <= 0 {
		perStream = DefaultOutputBytes
	}
	perStream = min(perStream, MaxOutputBytes)
	return 2*jsonEscapeBytes*int64(perStream) + answerMargin
}

// readAnswerBytes bounds the answer to a read of up to chars characters
// (0: computerd's default).
func readAnswerBytes(chars int64) int64 {
	if chars <= 0 {
		chars = DefaultReadChars
	}
	chars = min(chars, MaxReadChars)
	return jsonEscapeBytes*chars + answerMargin
}

// WithCallTimeout sets the deadline of a call, other than an exec, whose
// context has none (default DefaultCallTimeout).
func WithCallTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.callTimeout = d
		}
	}
}

// WithExecMargin sets how long past its own timeout an exec whose context
// has no deadline waits for its answer (default DefaultExecMargin).
func WithExecMargin(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.execMargin = d
		}
	}
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

		callTimeout: DefaultCallTimeout,
		execMargin:  DefaultExecMargin,
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
	err := c.call(ctx, http.MethodGet, "/healthz", nil, nil, &h)
	return h, err
}

// WaitHealthy polls computerd's health until it answers or ctx ends. It
// polls every 5 ms for the first two seconds (a daemon is usually up within
// tens of milliseconds of its container starting), then backs off to every
// 100 ms.
func (c *Client) WaitHealthy(ctx context.Context) error {
	wait, polls := 5*time.Millisecond, 0
	return c.pollHealth(ctx, func() time.Duration {
		if polls++; polls > 400 {
			wait = min(wait*2, 100*time.Millisecond)
		}
		return wait
	}, func(Health) (bool, error) { return true, nil })
}

// WaitScreen waits until a desktop computer's health answer says its
// screen is ready (computerd.ScreenReady). A computerd that reports no
// screen state counts as ready; one whose screen is unavailable is an
// error at once.
func (c *Client) WaitScreen(ctx context.Context) error {
	return c.pollHealth(ctx, func() time.Duration { return 20 * time.Millisecond }, func(h Health) (bool, error) {
		switch h.Screen {
		case ScreenReady, "":
			return true, nil
		case ScreenUnavailable:
			return false, fmt.Errorf("computerd at %s: the desktop's screen did not start", c.base)
		}
		return false, nil
	})
}

// pollHealth asks for computerd's health until done accepts an answer or
// fails, or ctx ends; pause gives the wait before each next ask. The
// error of an ended ctx carries the last answer or failure; an ask that
// ctx's end cut short keeps the answer before it.
func (c *Client) pollHealth(ctx context.Context, pause func() time.Duration, done func(Health) (bool, error)) error {
	var last any
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := c.Health(hctx)
		cancel()
		switch {
		case err == nil:
			ok, derr := done(h)
			if ok || derr != nil {
				return derr
			}
			last = h
		case last == nil || ctx.Err() == nil:
			last = err
		}
		t := time.NewTimer(pause())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("computerd at %s: %w (last: %+v)", c.base, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// Exec runs a command and waits for its result. req.TimeoutMs is required.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	timeout := time.Duration(min(max(req.TimeoutMs, 0), MaxExecTimeoutMs)) * time.Millisecond
	b := bounds{answer: execAnswerBytes(req.MaxOutputBytes), timeout: timeout + c.execMargin, what: "an exec of " + timeout.String()}
	var res ExecResult
	err := c.callBounded(ctx, b, http.MethodPost, "/v1/exec", nil, req, &res)
	return res, err
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
	err := c.callBounded(ctx, c.control(readAnswerBytes(limit)), http.MethodGet, "/v1/files/read", q, nil, &res)
	return res, err
}

// Write replaces a file atomically and reports what is on disk afterwards.
func (c *Client) Write(ctx context.Context, req WriteRequest) (WriteResult, error) {
	var res WriteResult
	err := c.call(ctx, http.MethodPut, "/v1/files/write", nil, req, &res)
	return res, err
}

// Stat describes one file; a symbolic link is described, not followed.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	err := c.call(ctx, http.MethodGet, "/v1/files/stat", url.Values{"path": {path}}, nil, &fi)
	return fi, err
}

// List lists a folder.
func (c *Client) List(ctx context.Context, path string) (ListResult, error) {
	var res ListResult
	err := c.callBounded(ctx, c.control(listAnswerBytes), http.MethodGet, "/v1/files/list", url.Values{"path": {path}}, nil, &res)
	return res, err
}

// Upload streams r into a file, replacing it atomically and creating
// missing parent folders. A zero mode keeps an existing file's
// permissions, or gives a new one 0644. Without a deadline in ctx, the
// upload ends when computerd takes none of it, or does not answer, for the
// client's call timeout.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, mode fs.FileMode) (WriteResult, error) {
	const method, p = http.MethodPut, "/v1/files/upload"
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	w := c.watch(ctx, fmt.Errorf("no progress within %s, the client's limit on an upload's silence when its context has no deadline: %w", c.callTimeout, context.DeadlineExceeded))
	defer w.stop()
	if w.timer != nil && r != nil {
		r = &progressReader{r: r, w: w}
	}
	var res WriteResult
	resp, err := c.send(w.ctx, method, p, q, r, "application/octet-stream")
	if err == nil {
		err = decodeAnswer(resp, &res, controlAnswerBytes)
	}
	return res, w.explain(err)
}

// Download streams a file. The caller closes the reader; a read error
// from it means the file arrived incomplete. The stream is bounded neither
// in size nor in time here: the caller bounds it (with ctx, and by how
// much it reads). Without a deadline in ctx, only the wait for the answer
// to begin is bounded, by the client's call timeout.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	w := c.watch(ctx, noAnswer(c.callTimeout, "the start of a download"))
	resp, err := c.send(w.ctx, http.MethodGet, "/v1/files/download", url.Values{"path": {path}}, nil, "")
	if err == nil && !w.disarm() {
		resp.Body.Close()
		err = context.Cause(w.ctx)
	}
	if err != nil {
		w.stop()
		return nil, w.explain(err)
	}
	if w.timer == nil {
		return resp.Body, nil
	}
	return &stopOnClose{ReadCloser: resp.Body, w: w}, nil
}

// Processes lists the computer's processes.
func (c *Client) Processes(ctx context.Context) ([]Process, error) {
	var ps []Process
	err := c.callBounded(ctx, c.control(listAnswerBytes), http.MethodGet, "/v1/processes", nil, nil, &ps)
	return ps, err
}

// Kill signals a process, or its group.
func (c *Client) Kill(ctx context.Context, req KillRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/processes/kill", nil, req, nil)
}

// bounds are a call's answer limit and its deadline when its context has
// none.
type bounds struct {
	answer  int64         // bytes
	timeout time.Duration // from the call's start
	what    string        // the call's kind, for the deadline's error
}

// control returns the bounds of a call that is not an exec.
func (c *Client) control(answer int64) bounds {
	return bounds{answer: answer, timeout: c.callTimeout, what: "a call"}
}

// call sends a request with an optional JSON body and decodes the JSON
// answer, of at most controlAnswerBytes, into out (nil: no answer
// expected), within the client's call timeout.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return c.callBounded(ctx, c.control(controlAnswerBytes), method, path, q, in, out)
}

// callBounded is call with the answer limit and default deadline of b.
func (c *Client) callBounded(ctx context.Context, b bounds, method, path string, q url.Values, in, out any) error {
	if _, ok := ctx.Deadline(); ok {
		return c.exchange(ctx, b.answer, method, path, q, in, out)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, b.timeout, noAnswer(b.timeout, b.what))
	defer cancel()
	return explain(ctx, c.exchange(ctx, b.answer, method, path, q, in, out))
}

// exchange sends the request and reads its answer.
func (c *Client) exchange(ctx context.Context, limit int64, method, path string, q url.Values, in, out any) error {
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
	return decodeAnswer(resp, out, limit)
}

// noAnswer is the cause of a call ended by the client's own deadline.
func noAnswer(d time.Duration, what string) error {
	return fmt.Errorf("no answer within %s, the deadline the client gives %s when its context has none: %w", d, what, context.DeadlineExceeded)
}

// explain makes sure that the error of a call ended by the client's own
// deadline (ctx's cause) says so.
func explain(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(err, cause) || !errors.Is(cause, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cause)
}

// watch arms the call timeout as a watchdog on a call whose context has
// no deadline: unless disarmed or restarted (progress), it cancels the
// call with cause once the timeout passes. With a deadline in ctx it does
// nothing. Call stop when the call is over.
func (c *Client) watch(ctx context.Context, cause error) *watchdog {
	w := &watchdog{d: c.callTimeout}
	if _, ok := ctx.Deadline(); ok {
		w.ctx, w.cancel = ctx, func(error) {}
		return w
	}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.timer = time.AfterFunc(w.d, func() { w.cancel(cause) })
	return w
}

// watchdog ends a call after a time without progress; see watch.
type watchdog struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	d      time.Duration
	timer  *time.Timer // nil: the caller's deadline applies

	mu       sync.Mutex
	disarmed bool
}

// progress restarts the timeout, unless the watchdog has already ended
// the call or been disarmed.
func (w *watchdog) progress() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.disarmed && w.ctx.Err() == nil {
		w.timer.Reset(w.d)
	}
}

// disarm stops the timeout and reports whether the call is still alive.
func (w *watchdog) disarm() bool {
	if w.timer == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disarmed = true
	w.timer.Stop()
	return w.ctx.Err() == nil
}

// stop disarms the watchdog and releases its context.
func (w *watchdog) stop() {
	w.disarm()
	w.cancel(nil)
}

func (w *watchdog) explain(err error) error {
	if w.timer == nil {
		return err
	}
	return explain(w.ctx, err)
}

// progressReader tells a watchdog of every read that yields data.
type progressReader struct {
	r io.Reader
	w *watchdog
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.w.progress()
	}
	return n, err
}

// stopOnClose releases a download's watchdog when its body is closed.
type stopOnClose struct {
	io.ReadCloser
	w    *watchdog
	once sync.Once
}

func (s *stopOnClose) Close() error {
	err := s.ReadCloser.Close()
	s.once.Do(s.w.stop)
	return err
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
	if pr, ok := body.(*progressReader); ok {
		// Keep the length net/http finds in an in-memory body.
		if l, ok := pr.r.(interface{ Len() int }); ok {
			req.ContentLength = int64(l.Len())
		}
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

// decodeAnswer decodes resp's JSON body, of at most limit bytes, into out
// (nil: the answer is dropped) and closes it.
func decodeAnswer(resp *http.Response, out any, limit int64) error {
	defer resp.Body.Close()
	method, path := resp.Request.Method, resp.Request.URL.Path
	if resp.ContentLength > limit {
		return answerTooLarge(method, path, limit)
	}
	lr := &limitedReader{r: resp.Body, n: limit}
	if out == nil {
		// The answer is not needed, so a failure to read it is not one
		// of the call's; only its size is checked.
		io.Copy(io.Discard, lr)
		if lr.over {
			return answerTooLarge(method, path, limit)
		}
		return nil
	}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.over {
			return answerTooLarge(method, path, limit)
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("computerd %s %s: read answer: %w", method, path, err)
	}
	return nil
}

func answerTooLarge(method, path string, limit int64) error {
	return fmt.Errorf("computerd %s %s: the answer is larger than %d bytes, the most this call reads: %w", method, path, limit, ErrAnswerTooLarge)
}

// errOverLimit ends the reading of an answer over its limit.
var errOverLimit = errors.New("over the limit")

// limitedReader reads at most n bytes from r, and fails a read past them
// (without keeping what it read past them).
type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.over {
		return 0, errOverLimit
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	if int64(n) <= l.n {
		l.n -= int64(n)
		return n, err
	}
	n, l.n, l.over = int(l.n), 0, true
	return n, errOverLimit
}

// answerError turns an error answer into an *APIError when it is
// computerd's, and into a plain error when it came from something else on
// the way (a proxy, a gateway) or could not be read whole.
func answerError(method, path string, resp *http.Response) error {
	e, err := httpjson.ReadError(resp, errorAnswerBytes)
	if err != nil {
		return fmt.Errorf("computerd %s %s: %s, reading the answer: %w", method, path, resp.Status, err)
	}
	if e.Code != "" {
		return &APIError{Status: e.Status, Code: e.Code, Message: e.Message}
	}
	b := e.Message
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
//
// Without a deadline in ctx, the client's call timeout bounds the opening
// of the stream (computerd's answer to the upgrade and the start message);
// the stream then lasts as long as ctx.
func (c *Client) ExecStream(ctx context.Context, start StreamStart, stdout, stderr io.Writer) (*Stream, error) {
	h := make(http.Header)
	c.setHeaders(h)
	octx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		octx, cancel = context.WithTimeoutCause(ctx, c.callTimeout, noAnswer(c.callTimeout, "the start of a stream"))
		defer cancel()
	}
	conn, resp, err := websocket.Dial(octx, c.base+"/v1/exec/stream", &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		err = explain(octx, err)
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
	if err := conn.Write(octx, websocket.MessageText, b); err != nil {
		conn.CloseNow()
		return nil, explain(octx, err)
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
