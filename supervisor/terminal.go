package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/supervisor/store"
)

// LoginShell is what a terminal runs when its request names no command:
// the computer user's shell ($SHELL, which the images set), as a login
// shell.
const LoginShell = `exec "${SHELL:-/bin/sh}" -l`

// terminalCheckEvery is how often an open terminal looks at its session
// in the store, to end with it when another supervisor ended it.
const terminalCheckEvery = 5 * time.Second

// TerminalRequest opens a terminal; see api.TerminalRequest.
type TerminalRequest = api.TerminalRequest

// Terminal is an interactive terminal on an agent's computer: a command
// on a pseudo-terminal whose output is read with Read and whose input is
// given with Write. It ends when its command exits, when its session ends
// (stop, expiry, idle sleep, disconnect), or on Close.
type Terminal struct {
	svc   *Service
	x     store.Session
	agent string
	st    *computerd.Stream
	out   *io.PipeReader
	outW  *io.PipeWriter
	done  chan struct{}
	// cancel ends the stream's context.
	cancel context.CancelFunc

	mu     sync.Mutex
	ended  *Error // why the session ended the terminal, once it did
	closed bool
	exit   api.TerminalExit
}

// terminals are the open terminals of this process, by session.
type terminals struct {
	mu  sync.Mutex
	set map[string]map[*Terminal]struct{}
}

// add registers t unless its session already has api.MaxTerminals.
func (ts *terminals) add(t *Terminal) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.set == nil {
		ts.set = make(map[string]map[*Terminal]struct{})
	}
	m := ts.set[t.x.ID]
	if len(m) >= api.MaxTerminals {
		return errorf(http.StatusConflict, api.CodeTooManyTerminals,
			"session %s already has %d terminals open, the most it may; close one first", t.x.ID, api.MaxTerminals)
	}
	if m == nil {
		m = make(map[*Terminal]struct{})
		ts.set[t.x.ID] = m
	}
	m[t] = struct{}{}
	return nil
}

func (ts *terminals) remove(t *Terminal) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.set[t.x.ID], t)
	if len(ts.set[t.x.ID]) == 0 {
		delete(ts.set, t.x.ID)
	}
}

// end ends every terminal of a session with a session_ended reason.
func (ts *terminals) end(session, why string) {
	ts.mu.Lock()
	var open []*Terminal
	for t := range ts.set[session] {
		open = append(open, t)
	}
	ts.mu.Unlock()
	for _, t := range open {
		t.endWith(why)
	}
}

// Terminals returns how many terminals the session has open in this
// process.
func (s *Service) Terminals(session string) int {
	s.terms.mu.Lock()
	defer s.terms.mu.Unlock()
	return len(s.terms.set[session])
}

// CheckTerminalRequest checks a terminal's size and command, and fills in
// the defaults.
func CheckTerminalRequest(r *TerminalRequest) error {
	if r.Cols == 0 {
		r.Cols = api.DefaultTerminalCols
	}
	if r.Rows == 0 {
		r.Rows = api.DefaultTerminalRows
	}
	if r.Cols < 1 || r.Cols > api.MaxTerminalCols {
		return badRequest("cols: %d is outside 1..%d", r.Cols, api.MaxTerminalCols)
	}
	if r.Rows < 1 || r.Rows > api.MaxTerminalRows {
		return badRequest("rows: %d is outside 1..%d", r.Rows, api.MaxTerminalRows)
	}
	if len(r.Command) > api.MaxTerminalCommandBytes {
		return badRequest("command: %d bytes, at most %d", len(r.Command), api.MaxTerminalCommandBytes)
	}
	if !utf8.ValidString(r.Command) {
		return badRequest("command: not UTF-8")
	}
	return nil
}

// OpenTerminal opens a terminal on the agent's running computer. Opening
// counts as one tool call; each input afterwards counts as activity for
// the session's idle sleep, as a tool call does.
func (s *Service) OpenTerminal(ctx context.Context, agent string, r TerminalRequest) (*Terminal, error) {
	if err := CheckTerminalRequest(&r); err != nil {
		return nil, err
	}
	x, err := s.running(ctx, agent)
	if err != nil {
		return nil, err
	}
	// The terminal outlives the request that opened it; Close ends it.
	// The client bounds the opening itself (its call timeout).
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &Terminal{svc: s, x: x, agent: agent, done: make(chan struct{}), cancel: cancel}
	t.out, t.outW = io.Pipe()
	if err := s.terms.add(t); err != nil {
		cancel()
		return nil, err
	}
	fail := func(err error) (*Terminal, error) {
		cancel()
		s.terms.remove(t)
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.ended != nil {
			return nil, t.ended
		}
		return nil, err
	}
	c, err := s.client(ctx, x)
	if err != nil {
		return fail(err)
	}
	command := r.Command
	if command == "" {
		command = LoginShell
	}
	st, err := c.ExecStream(sctx, computerd.StreamStart{Command: command, PTY: true, Cols: uint16(r.Cols), Rows: uint16(r.Rows)}, t.outW, nil)
	if err != nil {
		var ae *computerd.APIError
		if errors.As(err, &ae) {
			if ae.Code == "not_supported" {
				return fail(errorf(http.StatusUnprocessableEntity, "not_supported", "%s", ae.Message))
			}
			return fail(errorf(http.StatusBadGateway, CodeProvider, "the computer refused the terminal: %s", ae.Message))
		}
		s.log.Warn("open a terminal", "agent", agent, "session", x.ID, "err", err)
		return fail(errorf(http.StatusBadGateway, CodeProvider, "the computer did not open a terminal; see the supervisor's log"))
	}
	t.st = st
	go t.run()
	go t.watch()
	s.log.Info("terminal opened", "agent", agent, "session", x.ID, "cols", r.Cols, "rows", r.Rows, "command", r.Command != "")
	s.RecordAgent(ctx, "computer.terminal", agent)
	return t, nil
}

// run waits for the command's end and settles how the terminal ended.
func (t *Terminal) run() {
	code, _, err := t.st.Wait()
	t.mu.Lock()
	switch {
	case t.ended != nil:
		t.exit = api.TerminalExit{ExitCode: -1, Code: t.ended.Code, Message: t.ended.Message}
	case err != nil:
		msg := fmt.Sprintf("the link to the computer broke: %v", err)
		if t.closed {
			msg = "the terminal was closed"
		}
		t.exit = api.TerminalExit{ExitCode: -1, Code: api.CodeTerminalLost, Message: msg}
	default:
		t.exit = api.TerminalExit{ExitCode: code}
	}
	t.mu.Unlock()
	t.cancel()
	t.outW.Close()
	t.svc.terms.remove(t)
	close(t.done)
	t.svc.log.Info("terminal ended", "agent", t.agent, "session", t.x.ID, "exit", t.exit.ExitCode, "code", t.exit.Code)
}

// watch ends the terminal with its session when this process did not end
// the session itself: at its expiry, or when the store shows it ended.
func (t *Terminal) watch() {
	s := t.svc
	for {
		wait := terminalCheckEvery
		if left := t.x.ExpiresAt.Sub(s.clk.Now()); left < wait {
			wait = max(left, 0)
		}
		select {
		case <-t.done:
			return
		case <-s.clk.After(wait):
		}
		if !s.clk.Now().Before(t.x.ExpiresAt) {
			t.endWith(fmt.Sprintf("session %s expired at %s", t.x.ID, t.x.ExpiresAt.UTC().Format(time.RFC3339)))
			return
		}
		x, err := s.st.GetSession(context.Background(), t.x.ID)
		if err == nil && x.State != store.StateRunning {
			t.endWith(fmt.Sprintf("session %s is %s", x.ID, x.State))
			return
		}
	}
}

// endWith ends the terminal because its session ended.
func (t *Terminal) endWith(why string) {
	t.mu.Lock()
	if t.ended == nil {
		t.ended = errorf(http.StatusConflict, api.CodeSessionEnded, "the terminal ended with its session: %s", why)
	}
	t.mu.Unlock()
	t.kill()
}

// kill drops the stream (computerd then kills the command) and unblocks
// a reader of the output.
func (t *Terminal) kill() {
	t.outW.CloseWithError(io.EOF)
	t.cancel()
}

// Read reads the terminal's output; it returns io.EOF once the terminal
// ended.
func (t *Terminal) Read(p []byte) (int, error) { return t.out.Read(p) }

// Write sends p as typed input; it counts as activity for the session's
// idle sleep.
func (t *Terminal) Write(p []byte) (int, error) {
	t.svc.touch(context.Background(), t.x)
	return t.st.Write(p)
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(cols, rows int) error {
	r := TerminalRequest{Cols: cols, Rows: rows}
	if cols == 0 || rows == 0 {
		return badRequest("resize: cols and rows are required")
	}
	if err := CheckTerminalRequest(&r); err != nil {
		return err
	}
	return t.st.Resize(uint16(cols), uint16(rows))
}

// CloseInput sends end-of-file (^D).
func (t *Terminal) CloseInput() error { return t.st.CloseStdin() }

// Done is closed once the terminal has ended.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Wait waits for the terminal to end and says how.
func (t *Terminal) Wait() api.TerminalExit {
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit
}

// Close ends the terminal, stopping what runs in it, and waits for that.
func (t *Terminal) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.kill()
	<-t.done
}

// Session returns the id of the terminal's session.
func (t *Terminal) Session() string { return t.x.ID }

// endWhy says why a session that ends at now ends, for its terminals.
func endWhy(x store.Session, now time.Time, reason string) string {
	switch {
	case !now.Before(x.ExpiresAt):
		return fmt.Sprintf("session %s expired at %s", x.ID, x.ExpiresAt.UTC().Format(time.RFC3339))
	case !x.SleepAt.IsZero() && !now.Before(x.SleepAt):
		return fmt.Sprintf("session %s went to sleep after being idle", x.ID)
	case reason != "":
		return fmt.Sprintf("session %s ended: %s", x.ID, reason)
	}
	return fmt.Sprintf("session %s was stopped", x.ID)
}
