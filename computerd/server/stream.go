package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

const (
	// streamReadLimit bounds one message from a stream's client.
	streamReadLimit = 1 << 20
	// streamStartTimeout is how long a client has to send its StreamStart.
	streamStartTimeout = 30 * time.Second
	// streamPingInterval keeps idle streams alive through proxies, and
	// finds clients that vanished without closing.
	streamPingInterval = 30 * time.Second
	// stdinQueue is how many stdin frames wait for a command that is not
	// reading its stdin; beyond it the client is held back. Control
	// messages are handled in order with stdin data.
	stdinQueue = 16
)

// handleStream runs one command over a websocket; see the protocol in
// package computerd. The command is killed, whole tree, when its timeout
// passes or the client goes away.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		w.Header().Set("Upgrade", "websocket")
		return errorf(http.StatusUpgradeRequired, computerd.CodeBadRequest, "GET /v1/exec/stream is a websocket")
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.log.Info("stream: websocket accept failed", "err", err)
		return nil // Accept answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(streamReadLimit)
	ctx := r.Context()

	start, err := readStart(ctx, conn)
	if err != nil {
		s.streamFail(ctx, conn, err)
		return nil
	}
	c, err := s.start(startSpec{command: start.Command, cwd: start.Cwd, env: start.Env, stdin: true,
		pty: start.PTY, cols: start.Cols, rows: start.Rows})
	if err != nil {
		s.streamFail(ctx, conn, err)
		return nil
	}

	// ctx ends when the client goes away; the command is then killed.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &stream{log: s.log, conn: conn, c: c, stdin: make(chan []byte, stdinQueue), quit: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer cancel()
		st.read(ctx)
	}()
	go func() {
		defer wg.Done()
		st.feedStdin()
	}()
	go func() {
		defer wg.Done()
		st.keepAlive(ctx, cancel)
	}()

	stdout := newFrameWriter(ctx, conn, computerd.StreamStdout)
	stderr := newFrameWriter(ctx, conn, computerd.StreamStderr)
	o := s.wait(ctx, c, time.Duration(start.TimeoutMs)*time.Millisecond, stdout, stderr)
	if o.held {
		stderr.Write([]byte(heldMarker(s.grace)))
	}
	close(st.quit)
	if !o.canceled {
		sendControl(ctx, conn, computerd.StreamControl{Type: "exit", ExitCode: o.exitCode, TimedOut: o.timedOut})
		conn.Close(websocket.StatusNormalClosure, "")
	}
	conn.CloseNow()
	cancel()
	wg.Wait()
	s.log.Info("stream exec", "pid", c.pid, "exit", o.exitCode, "timedOut", o.timedOut, "canceled", o.canceled,
		"held", o.held, "ms", o.duration.Milliseconds())
	return nil
}

// readStart reads and checks the client's first message.
func readStart(ctx context.Context, conn *websocket.Conn) (computerd.StreamStart, error) {
	var start computerd.StreamStart
	ctx, cancel := context.WithTimeout(ctx, streamStartTimeout)
	defer cancel()
	typ, data, err := conn.Read(ctx)
	if err != nil {
		return start, fmt.Errorf("read stream start: %w", err)
	}
	if typ != websocket.MessageText {
		return start, badRequest("the first message must be a text StreamStart")
	}
	if err := json.Unmarshal(data, &start); err != nil {
		return start, badRequest("invalid StreamStart: %v", err)
	}
	if start.TimeoutMs < 0 || start.TimeoutMs > computerd.MaxExecTimeoutMs {
		return start, badRequest("timeoutMs: %d is outside 0..%d (0: none)", start.TimeoutMs, computerd.MaxExecTimeoutMs)
	}
	return start, nil
}

// streamFail ends a stream whose command never started with an exit
// message that carries the error.
func (s *Server) streamFail(ctx context.Context, conn *websocket.Conn, err error) {
	var ae *httpjson.Error
	if !errors.As(err, &ae) {
		s.log.Warn("stream failed", "err", err)
		ae = errorf(http.StatusInternalServerError, computerd.CodeInternal, "%v", err)
	}
	sendControl(ctx, conn, computerd.StreamControl{Type: "exit", ExitCode: -1, Error: ae.Message, Code: ae.Code})
	conn.Close(websocket.StatusNormalClosure, "")
}

func sendControl(ctx context.Context, conn *websocket.Conn, m computerd.StreamControl) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, b)
}

// stream is the state a running stream's goroutines share.
type stream struct {
	log     *slog.Logger
	conn    *websocket.Conn
	c       *child
	stdin   chan []byte   // queued stdin data; nil closes stdin
	quit    chan struct{} // closed once the command has ended
	blocked atomic.Bool   // read waits for room in the stdin queue
}

// read handles the client's messages until the connection ends: stdin
// data goes to the stdin queue, signals to the command's group.
func (st *stream) read(ctx context.Context) {
	open := true
	for {
		typ, data, err := st.conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) >= 2 && data[0] == computerd.StreamStdin && open {
				st.queue(data[1:])
			}
			continue
		}
		var m computerd.StreamControl
		if err := json.Unmarshal(data, &m); err != nil {
			st.log.Info("stream: bad control message", "err", err)
			continue
		}
		switch m.Type {
		case "signal":
			sig, ok := parseSignal(m.Signal)
			if !ok {
				notice := fmt.Sprintf("\n[computerd: unknown signal %q]\n", m.Signal)
				st.conn.Write(ctx, websocket.MessageBinary, append([]byte{computerd.StreamStderr}, notice...))
				continue
			}
			select {
			case <-st.c.done:
				continue // once the shell is reaped its pid may be reused
			default:
			}
			if err := syscall.Kill(-st.c.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				st.log.Warn("stream: signal", "pid", st.c.pid, "signal", sig.String(), "err", err)
			}
		case "close_stdin":
			if st.c.pty != nil {
				st.queue([]byte{4}) // a terminal's end of file: ^D
				continue
			}
			if open {
				open = false
				st.queue(nil)
			}
		case "resize":
			if st.c.pty != nil {
				if err := setSize(st.c.pty, m.Cols, m.Rows); err != nil {
					st.log.Info("stream: resize", "err", err)
				}
			}
		}
	}
}

// queue hands b to feedStdin, waiting while the queue is full.
func (st *stream) queue(b []byte) {
	st.blocked.Store(true)
	defer st.blocked.Store(false)
	select {
	case st.stdin <- b:
	case <-st.quit:
	}
}

// feedStdin writes queued data to the command's stdin; nil closes it.
// Once the command stops reading, the rest is dropped.
func (st *stream) feedStdin() {
	for {
		select {
		case <-st.quit:
			return
		case b := <-st.stdin:
			if b == nil {
				st.c.stdin.Close()
				continue
			}
			st.c.stdin.Write(b) // an error means the command closed its stdin
		}
	}
}

// keepAlive pings the client until the command ends; a client that does
// not answer is taken as gone. While read waits on a full stdin queue
// nobody reads the answer, so no ping is sent then.
func (st *stream) keepAlive(ctx context.Context, gone func()) {
	t := time.NewTicker(streamPingInterval)
	defer t.Stop()
	for {
		select {
		case <-st.quit:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if st.blocked.Load() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, streamPingInterval)
			err := st.conn.Ping(pctx)
			cancel()
			if err != nil && !st.blocked.Load() {
				gone()
				return
			}
		}
	}
}

// frameWriter sends what is written to it as data frames of one channel.
type frameWriter struct {
	ctx  context.Context
	conn *websocket.Conn
	buf  []byte
}

func newFrameWriter(ctx context.Context, conn *websocket.Conn, channel byte) *frameWriter {
	return &frameWriter{ctx: ctx, conn: conn, buf: append(make([]byte, 0, 1+pumpBytes), channel)}
}

func (f *frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), pumpBytes)
		f.buf = append(f.buf[:1], p[:k]...)
		if err := f.conn.Write(f.ctx, websocket.MessageBinary, f.buf); err != nil {
			return 0, err
		}
		p = p[k:]
	}
	return n, nil
}
