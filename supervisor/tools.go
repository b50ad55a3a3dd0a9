package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/supervisor/store"
)

// UncertainAdvice is what an agent is told when a command's outcome was lost.
const UncertainAdvice = "The command's result was lost (the computer or the link failed while it ran). " +
	"It may or may not have run, and it will not be re-run automatically. " +
	"Inspect the computer (files, processes) before running a command that could repeat a side effect."

// running returns the agent's running session with time left. It reads
// the live session first, as every tool call does; the connection and the
// agent are looked up only to say why there is none.
func (s *Service) running(ctx context.Context, agent string) (store.Session, error) {
	return s.live(ctx, agent, false)
}

// live is running, with hosted browser sessions allowed when browsers is
// set (for the browser tools).
func (s *Service) live(ctx context.Context, agent string, browsers bool) (store.Session, error) {
	x, err := s.st.LiveSession(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		if _, cerr := s.connection(ctx, agent); cerr != nil {
			return x, cerr
		}
		return x, errorf(http.StatusConflict, CodeNoSession, "agent %q has no running computer; call computer_start first", agent)
	}
	if err != nil {
		return x, err
	}
	if x.State == store.StateStarting {
		if _, err := s.awaitLive(ctx, x); err != nil {
			return x, err
		}
		if x, err = s.st.GetSession(ctx, x.ID); err != nil {
			return x, err
		}
	}
	switch x.State {
	case store.StateRunning:
	case store.StateUncertain:
		return x, errorf(http.StatusConflict, CodeUncertain, "session %s is uncertain: %s", x.ID, s.view(x).Message)
	default:
		return x, errorf(http.StatusConflict, CodeNoSession, "agent %q has no running computer (session %s is %s); call computer_start", agent, x.ID, x.State)
	}
	if !s.clk.Now().Before(x.ExpiresAt) {
		return x, errorf(http.StatusConflict, CodeNoSession, "session %s expired at %s; call computer_start for a new one", x.ID, x.ExpiresAt.Format(time.RFC3339))
	}
	if _, ok := s.cfg.Providers[x.Provider].(BrowserSession); ok && !browsers {
		return x, errorf(http.StatusUnprocessableEntity, CodeBrowserSession,
			"not available on a browser session: the %s provider gives a hosted browser with no shell or files; use the browser tools (browser_navigate, browser_snapshot, ...) or its CDP URL in the session's browser.cdpUrl", x.Provider)
	}
	if x, err = s.woken(ctx, x); err != nil {
		return x, err
	}
	s.touch(ctx, x)
	return x, nil
}

// ExecRequest is the body of computer_exec.
type ExecRequest struct {
	Command        string `json:"command"`
	TimeoutSeconds *int   `json:"timeoutSeconds,omitempty"`
}

// ExecResult is the answer of computer_exec.
type ExecResult = api.ExecResult

// Exec runs a shell command on the agent's computer.
func (s *Service) Exec(ctx context.Context, agent string, r ExecRequest) (ExecResult, error) {
	if strings.TrimSpace(r.Command) == "" {
		return ExecResult{}, badRequest("command: required")
	}
	if n := utf8.RuneCountInString(r.Command); n > MaxCommandChars {
		return ExecResult{}, limitf("command: %d characters, at most %d", n, MaxCommandChars)
	}
	timeout := DefaultExecTimeoutSeconds
	if r.TimeoutSeconds != nil {
		timeout = *r.TimeoutSeconds
		if timeout < 1 || timeout > MaxExecTimeoutSeconds {
			return ExecResult{}, limitf("timeoutSeconds: %d is outside 1..%d", timeout, MaxExecTimeoutSeconds)
		}
	}
	x, err := s.running(ctx, agent)
	if err != nil {
		return ExecResult{}, err
	}
	d := time.Duration(timeout) * time.Second
	if left := x.ExpiresAt.Sub(s.clk.Now()); left < d {
		d = left
	}
	c, err := s.client(ctx, x)
	if err != nil {
		return ExecResult{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, d+15*time.Second)
	defer cancel()
	res, err := c.Exec(cctx, computerd.ExecRequest{Command: r.Command, TimeoutMs: max(d.Milliseconds(), 1), MaxOutputBytes: ExecOutputBytes})
	if err != nil {
		var ae *computerd.APIError
		if errors.As(err, &ae) {
			return ExecResult{}, errorf(http.StatusBadGateway, CodeProvider, "computer refused the command: %s", ae.Message)
		}
		if ctx.Err() != nil {
			return ExecResult{}, ctx.Err()
		}
		s.log.Warn("exec outcome lost", "agent", agent, "session", x.ID, "err", err)
		return ExecResult{ExitCode: -1, Uncertain: true, Advice: UncertainAdvice}, nil
	}
	out := ExecResult{
		ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr,
		Truncated: res.StdoutTruncated || res.StderrTruncated, TimedOut: res.TimedOut,
	}
	if res.TimedOut {
		out.Advice = fmt.Sprintf("The command was stopped after %s and its processes were killed. Run long jobs in the background with their output redirected to a file, then poll the file.", d.Round(time.Second))
	}
	return out, nil
}

// ReadRequest is the body of computer_read_file.
type ReadRequest = api.ReadFileRequest

// ReadResult is the answer of computer_read_file.
type ReadResult struct {
	Content    string `json:"content"`
	Truncated  bool   `json:"truncated"`
	NextOffset *int64 `json:"nextOffset,omitempty"`
}

func checkPath(p string) error {
	if strings.TrimSpace(p) == "" {
		return badRequest("path: required")
	}
	if len(p) > MaxPathChars {
		return limitf("path: %d characters, at most %d", len(p), MaxPathChars)
	}
	if strings.ContainsRune(p, 0) {
		return badRequest("path: contains a NUL byte")
	}
	return nil
}

// ReadFile reads up to MaxReadChars characters of a UTF-8 file from offset.
func (s *Service) ReadFile(ctx context.Context, agent string, r ReadRequest) (ReadResult, error) {
	if err := checkPath(r.Path); err != nil {
		return ReadResult{}, err
	}
	if r.Offset < 0 {
		return ReadResult{}, badRequest("offset: %d must not be negative", r.Offset)
	}
	x, err := s.running(ctx, agent)
	if err != nil {
		return ReadResult{}, err
	}
	c, err := s.client(ctx, x)
	if err != nil {
		return ReadResult{}, err
	}
	res, err := c.Read(ctx, r.Path, r.Offset, MaxReadChars)
	if err != nil {
		return ReadResult{}, fileError(r.Path, err)
	}
	out := ReadResult{Content: res.Content, Truncated: res.Truncated}
	if res.Truncated {
		n := res.NextOffset
		out.NextOffset = &n
	}
	return out, nil
}

// WriteRequest is the body of computer_write_file.
type WriteRequest = api.WriteFileRequest

// WriteResult is the answer of computer_write_file: what is on disk.
type WriteResult = api.WriteFileResult

// WriteFile writes a file atomically and verifies its size and checksum.
func (s *Service) WriteFile(ctx context.Context, agent string, r WriteRequest) (WriteResult, error) {
	if err := checkPath(r.Path); err != nil {
		return WriteResult{}, err
	}
	if !utf8.ValidString(r.Content) {
		return WriteResult{}, badRequest("content: not valid UTF-8")
	}
	if n := utf8.RuneCountInString(r.Content); n > MaxWriteChars {
		return WriteResult{}, limitf("content: %d characters, at most %d", n, MaxWriteChars)
	}
	x, err := s.running(ctx, agent)
	if err != nil {
		return WriteResult{}, err
	}
	c, err := s.client(ctx, x)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := c.Write(ctx, computerd.WriteRequest{Path: r.Path, Content: r.Content, MkdirAll: true})
	if err != nil {
		return WriteResult{}, fileError(r.Path, err)
	}
	sum := sha256.Sum256([]byte(r.Content))
	want := hex.EncodeToString(sum[:])
	if res.Bytes != int64(len(r.Content)) || res.SHA256 != want {
		s.log.Error("write verification failed", "agent", agent, "session", x.ID, "path", r.Path, "bytes", res.Bytes, "want", len(r.Content))
		return WriteResult{}, errorf(http.StatusBadGateway, CodeProvider, "write to %s could not be verified: the computer reports %d bytes with sha256 %s, expected %d bytes with sha256 %s", r.Path, res.Bytes, res.SHA256, len(r.Content), want)
	}
	return WriteResult{Bytes: res.Bytes, SHA256: res.SHA256}, nil
}

// fileError maps computerd's file errors to the API's.
func fileError(path string, err error) error {
	var ae *computerd.APIError
	if errors.Is(err, computerd.ErrAnswerTooLarge) {
		return errorf(http.StatusBadGateway, CodeProvider, "the computer's answer was larger than the call allows: %v", err)
	}
	if !errors.As(err, &ae) {
		return errorf(http.StatusBadGateway, CodeProvider, "the computer did not answer: %v", err)
	}
	switch ae.Code {
	case computerd.CodeNotFound:
		return errorf(http.StatusNotFound, CodeNotFound, "%s: %s", path, ae.Message)
	case computerd.CodeNotUTF8:
		return errorf(http.StatusUnprocessableEntity, CodeNotUTF8, "%s: %s", path, ae.Message)
	case computerd.CodeIsDir, computerd.CodeTooLarge:
		return errorf(http.StatusUnprocessableEntity, CodeLimit, "%s: %s", path, ae.Message)
	case computerd.CodePermission:
		return errorf(http.StatusForbidden, "permission_denied", "%s: %s", path, ae.Message)
	case computerd.CodeBadRequest:
		return badRequest("%s: %s", path, ae.Message)
	}
	return errorf(http.StatusBadGateway, CodeProvider, "%s: %s", path, ae.Message)
}

// UsageView is the answer of GET /v1/usage.
type UsageView = api.Usage

// Usage sums session seconds by provider or workspace for sessions started
// in [from, to). Zero times mean the last 30 days up to now.
func (s *Service) Usage(ctx context.Context, by string, from, to time.Time) (UsageView, error) {
	if by == "" {
		by = "provider"
	}
	if by != "provider" && by != "workspace" {
		return UsageView{}, badRequest("by: %q must be provider or workspace", by)
	}
	now := s.clk.Now().UTC()
	if to.IsZero() {
		to = now.Add(time.Second)
	}
	if from.IsZero() {
		from = to.AddDate(0, 0, -30)
	}
	if !from.Before(to) {
		return UsageView{}, badRequest("from: must be before to")
	}
	rows, err := s.st.Usage(ctx, by, from, to, now)
	if err != nil {
		return UsageView{}, err
	}
	if rows == nil {
		rows = []store.UsageRow{}
	}
	stored, err := s.st.Stored(ctx)
	if err != nil {
		return UsageView{}, err
	}
	out := UsageView{By: by, From: from, To: to, Rows: rows, Stored: make([]api.StoredRow, 0, len(stored))}
	for _, r := range stored {
		out.Stored = append(out.Stored, api.StoredRow{Agent: r.AgentID, Workspace: r.Workspace, Bytes: r.Bytes, Archives: r.Archives})
	}
	return out, nil
}
