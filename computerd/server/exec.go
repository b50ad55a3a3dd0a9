package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

const (
	// maxCommandBytes is the longest command: Linux refuses a single
	// argument of MAX_ARG_STRLEN (128 KiB, with its NUL) or more.
	maxCommandBytes = 128<<10 - 1
	// maxExecBody bounds the JSON body of an exec; stdin may need up to six
	// bytes of JSON for each of its MaxStdinBytes.
	maxExecBody = 6*computerd.MaxStdinBytes + 1<<20
	// pumpBytes is the read size of output pipes, and so the largest data
	// frame of a stream.
	pumpBytes = 32 << 10
)

// child is a command started in its own process group. Its shell's pid is
// also the group's id.
type child struct {
	pid    int
	stdout *os.File // read ends of the command's output pipes
	stderr *os.File
	stdin  *os.File      // write end of its stdin pipe; nil for /dev/null
	pty    *os.File      // the terminal's master side, when it runs on one
	done   chan struct{} // closed once the shell has exited and been reaped
	state  *os.ProcessState
}

// closeFiles closes computerd's ends of the command's pipes.
func (c *child) closeFiles() {
	c.stdout.Close()
	c.stderr.Close()
	if c.stdin != nil {
		c.stdin.Close()
	}
}

// startSpec is what start needs to run a command.
type startSpec struct {
	command string
	cwd     string
	env     map[string]string
	stdin   bool // give the command a stdin pipe instead of /dev/null
	pty     bool // run it on a pseudo-terminal instead (implies stdin)
	cols    uint16
	rows    uint16
}

// start runs sp.command with /bin/sh -c in a new process group.
func (s *Server) start(sp startSpec) (*child, error) {
	if err := checkCommand(sp.command); err != nil {
		return nil, err
	}
	dir, err := s.workDir(sp.cwd)
	if err != nil {
		return nil, err
	}
	env, err := s.environ(sp.env)
	if err != nil {
		return nil, err
	}

	if sp.pty {
		return s.startPTY(sp, dir, env)
	}
	var files []*os.File // every pipe end, for closing on failure
	fail := func(err error) (*child, error) {
		closeAll(files)
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("start command: %w", err))
	}
	files = append(files, outR, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("start command: %w", err))
	}
	files = append(files, errR, errW)
	var inR, inW *os.File
	if sp.stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			return fail(fmt.Errorf("start command: %w", err))
		}
		files = append(files, inR, inW)
	}

	cmd := exec.Command("/bin/sh", "-c", sp.command)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = outW
	cmd.Stderr = errW
	if inR != nil {
		cmd.Stdin = inR
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	c := &child{stdout: outR, stderr: errR, stdin: inW, done: make(chan struct{})}
	if err := s.launch(cmd, c); err != nil {
		return fail(err)
	}
	// The command holds its own ends now.
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	s.reapChild(c, cmd)
	return c, nil
}

// launch starts cmd as the child c and registers it, unless computerd is
// shutting down.
func (s *Server) launch(cmd *exec.Cmd, c *child) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errorf(http.StatusServiceUnavailable, computerd.CodeInternal, "computerd is shutting down")
	}
	err := cmd.Start()
	if err == nil {
		c.pid = cmd.Process.Pid
		s.children[c.pid] = c
	}
	s.mu.Unlock()
	if errors.Is(err, syscall.E2BIG) {
		return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge, "command and environment too large to start: %v", err)
	}
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	return nil
}

// reapChild waits for the command's shell in the background and records how
// it ended.
func (s *Server) reapChild(c *child, cmd *exec.Cmd) {
	go func() {
		if err := cmd.Wait(); err != nil && !errors.As(err, new(*exec.ExitError)) {
			s.log.Error("wait for command", "pid", c.pid, "err", err)
		}
		c.state = cmd.ProcessState
		s.mu.Lock()
		delete(s.children, c.pid)
		s.mu.Unlock()
		close(c.done)
	}()
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func checkCommand(cmd string) error {
	switch {
	case strings.TrimSpace(cmd) == "":
		return badRequest("command: required")
	case len(cmd) > maxCommandBytes:
		return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge,
			"command: %d bytes, at most %d; pass a longer script on stdin or write it to a file", len(cmd), maxCommandBytes)
	case strings.IndexByte(cmd, 0) >= 0:
		return badRequest("command: contains a NUL byte")
	}
	return nil
}

// workDir resolves a command's working folder; empty means Home.
func (s *Server) workDir(dir string) (string, error) {
	if dir == "" {
		return s.cfg.Home, nil
	}
	p, err := s.resolve("cwd", dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", badRequest("cwd: %v", err)
	}
	if !fi.IsDir() {
		return "", badRequest("cwd: %s is not a directory", p)
	}
	return p, nil
}

// hiddenEnv are computerd's own settings, never passed to commands.
var hiddenEnv = []string{computerd.EnvTokenHash, computerd.EnvComputerID, computerd.EnvBindHash}

// environ returns a command's environment: computerd's own, without its
// settings, with HOME set, then Config.Env, the bind's and extra on top.
func (s *Server) environ(extra map[string]string) ([]string, error) {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" && !slices.Contains(hiddenEnv, k) {
			env[k] = v
		}
	}
	env["HOME"] = s.cfg.Home
	for k, v := range s.cfg.Env {
		env[k] = v
	}
	for k, v := range s.boundEnv() {
		env[k] = v
	}
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, badRequest("env: invalid name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, badRequest("env: %s contains a NUL byte", k)
		}
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

// resolve turns a request path into a clean absolute path; relative paths
// resolve against Home.
func (s *Server) resolve(field, p string) (string, error) {
	if p == "" {
		return "", badRequest("%s: required", field)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", badRequest("%s: contains a NUL byte", field)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.cfg.Home, p)
	}
	return filepath.Clean(p), nil
}

// outcome is how a command ended.
type outcome struct {
	exitCode int
	timedOut bool // killed at its timeout
	canceled bool // killed because ctx was done (the caller went away)
	held     bool // output still open OutputGrace after the shell exited
	duration time.Duration
}

// wait copies the command's output to stdout and stderr until it exits,
// its timeout passes (0: none) or ctx is done. The last two kill its whole
// tree. After the shell exits, output is read for at most the output grace
// more, so that a background process holding the pipes cannot stall the
// answer; such a process is left running.
func (s *Server) wait(ctx context.Context, c *child, timeout time.Duration, stdout, stderr io.Writer) outcome {
	t0 := time.Now()
	var wg sync.WaitGroup
	wg.Add(2)
	go pump(&wg, c.stdout, stdout)
	go pump(&wg, c.stderr, stderr)
	pumped := make(chan struct{})
	go func() {
		wg.Wait()
		close(pumped)
	}()

	var o outcome
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-c.done:
	case <-expired:
		o.timedOut = true
		killTree(c.pid)
		<-c.done
	case <-ctx.Done():
		o.canceled = true
		killTree(c.pid)
		<-c.done
	}

	grace := time.NewTimer(s.grace)
	defer grace.Stop()
	select {
	case <-pumped:
	case <-grace.C:
		o.held = true
		c.stdout.Close()
		c.stderr.Close()
		<-pumped
	}
	c.closeFiles()

	o.duration = time.Since(t0)
	o.exitCode = exitCode(c.state)
	if o.timedOut {
		o.exitCode = computerd.TimeoutExitCode
	}
	return o
}

// pump copies r to w until r ends. When w fails, the rest of r is read and
// dropped, so that the command never blocks on a full pipe.
func pump(wg *sync.WaitGroup, r io.Reader, w io.Writer) {
	defer wg.Done()
	buf := make([]byte, pumpBytes)
	for {
		n, err := r.Read(buf)
		if n > 0 && w != nil {
			if _, werr := w.Write(buf[:n]); werr != nil {
				w = nil
			}
		}
		if err != nil {
			return
		}
	}
}

// exitCode is the shell's exit status, or 128+n when signal n killed it.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// heldMarker is appended to stderr when output was still open after the
// grace.
func heldMarker(grace time.Duration) string {
	return fmt.Sprintf("\n[computerd: output was still held open %s after the command exited, by a process it left in the background; "+
		"stopped reading. Redirect background output, e.g. `cmd >cmd.log 2>&1 &`]\n", grace)
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) error {
	var req computerd.ExecRequest
	if err := decodeJSON(w, r, maxExecBody, &req); err != nil {
		return err
	}
	if req.TimeoutMs < 1 || req.TimeoutMs > computerd.MaxExecTimeoutMs {
		return badRequest("timeoutMs: %d is outside 1..%d", req.TimeoutMs, computerd.MaxExecTimeoutMs)
	}
	limit := req.MaxOutputBytes
	if limit == 0 {
		limit = computerd.DefaultOutputBytes
	}
	if limit < 1 || limit > computerd.MaxOutputBytes {
		return badRequest("maxOutputBytes: %d is outside 1..%d", req.MaxOutputBytes, computerd.MaxOutputBytes)
	}
	if len(req.Stdin) > computerd.MaxStdinBytes {
		return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge, "stdin: %d bytes, at most %d", len(req.Stdin), computerd.MaxStdinBytes)
	}
	c, err := s.start(startSpec{command: req.Command, cwd: req.Cwd, env: req.Env, stdin: req.Stdin != ""})
	if err != nil {
		return err
	}
	if c.stdin != nil {
		go func() {
			io.WriteString(c.stdin, req.Stdin)
			c.stdin.Close()
		}()
	}
	stdout, stderr := newCapture(limit), newCapture(limit)
	o := s.wait(r.Context(), c, time.Duration(req.TimeoutMs)*time.Millisecond, stdout, stderr)

	res := computerd.ExecResult{
		ExitCode:    o.exitCode,
		StdoutBytes: stdout.total,
		StderrBytes: stderr.total,
		TimedOut:    o.timedOut,
		DurationMs:  o.duration.Milliseconds(),
	}
	res.Stdout, res.StdoutTruncated = stdout.result()
	res.Stderr, res.StderrTruncated = stderr.result()
	if o.held {
		res.Stderr += heldMarker(s.grace)
	}
	s.log.Info("exec", "pid", c.pid, "exit", res.ExitCode, "timedOut", o.timedOut, "canceled", o.canceled,
		"held", o.held, "ms", res.DurationMs, "stdoutBytes", res.StdoutBytes, "stderrBytes", res.StderrBytes)
	httpjson.Write(w, http.StatusOK, res)
	s.trimSoon(len(res.Stdout) + len(res.Stderr))
	return nil
}
