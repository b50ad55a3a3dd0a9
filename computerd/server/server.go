// Package server is computerd's HTTP side: it runs commands, serves files
// and lists processes inside a computer for the holder of the computer's
// token. The wire protocol is defined in package computerd.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/browser"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
)

// DefaultOutputGrace is how long an exec keeps reading output after its
// shell exited, for processes it left in the background.
const DefaultOutputGrace = 2 * time.Second

// Config configures a Server.
type Config struct {
	// TokenHash is the hex SHA-256 of the only token accepted on /v1.
	// An empty hash accepts nothing.
	TokenHash string
	// BindHash, when TokenHash is empty, is the hex SHA-256 of a one-time
	// bind secret: the server waits unbound, serving only health and
	// POST /v1/bind, until the holder of that secret binds it (bind.go).
	BindHash string
	// Home is the folder commands start in and relative paths resolve
	// against (default computerd.Home).
	Home string
	// ComputerID names the computer in logs and health answers.
	ComputerID string
	// Version is reported by GET /healthz.
	Version string
	// Logger receives the server's logs (default: discarded).
	Logger *slog.Logger
	// OutputGrace is how long an exec still reads output after its shell
	// exited before it answers (default DefaultOutputGrace).
	OutputGrace time.Duration
	// Desktop, when set, serves live view and the screenshot (package
	// images/computerd/desktop) under /v1/desktop and /v1/screenshot.
	Desktop http.Handler
	// Screen, when set, reports the desktop's screen in the health
	// answer (computerd.Health.Screen).
	Screen func() string
	// Browser, when set, serves the browser tools under
	// browser.PathPrefix: one Chromium started on the first call, with
	// the commands' environment (and so the computer's proxy), stopped
	// when the server closes. Its Env, Start and Exited are the server's.
	Browser *browser.LauncherConfig
	// Env is added to the environment commands inherit, as a container's
	// variables are; a daemon running in-process (the fake providers) sets
	// it instead of its own process environment.
	Env map[string]string
}

// Server serves computerd's API. It is an http.Handler.
//
// A large answer leaves the heap large for a while; the server returns the
// freed memory to the operating system shortly after, to keep the daemon
// small while it idles.
type Server struct {
	cfg     Config
	log     *slog.Logger
	grace   time.Duration
	maxList int // entries of one listing, computerd.MaxListEntries
	mux     *http.ServeMux
	binding atomic.Pointer[binding] // nil until bound; see bind.go

	// archiving is held by the one archive or restore of the home that
	// may run at a time.
	archiving sync.Mutex
	outcomes  outcomes // of the last archives (archive.go)

	// mu guards the fields below. It is held across starting a child so
	// that ReapOrphans never reaps a child that exec is about to wait for.
	mu       sync.Mutex
	children map[int]*child
	closed   bool
	trim     *time.Timer // returns memory to the OS after large answers
	// own are processes computerd runs for itself (the browser), which
	// the reaper leaves to their own waiters.
	own map[int]bool

	browser *browser.Launcher // nil without Config.Browser
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.Home == "" {
		cfg.Home = computerd.Home
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "computerd"),
		grace:    cfg.OutputGrace,
		maxList:  computerd.MaxListEntries,
		mux:      http.NewServeMux(),
		children: make(map[int]*child),
		own:      make(map[int]bool),
	}
	if s.grace <= 0 {
		s.grace = DefaultOutputGrace
	}
	if cfg.TokenHash != "" {
		s.binding.Store(&binding{tokenHash: cfg.TokenHash})
	}
	if cfg.Browser != nil {
		bc := *cfg.Browser
		bc.Env = s.browserEnv
		bc.Start = s.startOwn
		bc.Exited = s.forgetOwn
		if bc.Logger == nil {
			bc.Logger = cfg.Logger
		}
		s.browser = browser.NewLauncher(bc)
	}
	s.routes()
	return s
}

// browserEnv is the browser's environment: the commands' own.
func (s *Server) browserEnv() []string {
	env, err := s.environ(nil)
	if err != nil {
		return os.Environ()
	}
	return env
}

// startOwn starts a process computerd runs for itself, unless it is
// shutting down, and keeps the reaper away from it.
func (s *Server) startOwn(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("computerd is shutting down")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.own[cmd.Process.Pid] = true
	return nil
}

func (s *Server) forgetOwn(pid int) {
	s.mu.Lock()
	delete(s.own, pid)
	s.mu.Unlock()
}

// handlerFunc is an HTTP handler that reports a failure as an error; errors
// that are not *httpjson.Error answer 500.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) routes() {
	s.route("/healthz", "GET", s.handleHealth, false)
	s.route("/v1/bind", "POST", s.handleBind, false)
	s.route("/v1/exec", "POST", s.handleExec, true)
	s.route("/v1/exec/stream", "GET", s.handleStream, true)
	s.route("/v1/files/read", "GET", s.handleRead, true)
	s.route("/v1/files/write", "PUT", s.handleWrite, true)
	s.route("/v1/files/stat", "GET", s.handleStat, true)
	s.route("/v1/files/list", "GET", s.handleList, true)
	s.route("/v1/files/upload", "PUT", s.handleUpload, true)
	s.route("/v1/files/download", "GET", s.handleDownload, true)
	s.route("/v1/processes", "GET", s.handleProcesses, true)
	s.route("/v1/processes/kill", "POST", s.handleKill, true)
	s.route(computerd.ArchiveOutcomePath, "GET", s.handleArchiveOutcome, true)
	s.mux.Handle("/v1/archive", s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		switch r.Method {
		case http.MethodGet:
			return s.handleArchive(w, r)
		case http.MethodPut:
			return s.handleRestore(w, r)
		}
		w.Header().Set("Allow", "GET, PUT")
		return errorf(http.StatusMethodNotAllowed, computerd.CodeBadRequest, "%s /v1/archive: use GET or PUT", r.Method)
	}, true))
	s.mux.Handle(computerd.PortsPath, s.wrap(s.handlePorts, true))
	if s.browser != nil {
		h := browser.NewServer(s.browser, s.log)
		s.mux.Handle(browser.PathPrefix, s.wrap(func(w http.ResponseWriter, r *http.Request) error { h.ServeHTTP(w, r); return nil }, true))
	}
	if d := s.cfg.Desktop; d != nil {
		serve := func(w http.ResponseWriter, r *http.Request) error { d.ServeHTTP(w, r); return nil }
		s.mux.Handle("/v1/desktop", s.wrap(serve, true))
		s.mux.Handle("/v1/desktop/", s.wrap(serve, true))
		s.mux.Handle("/v1/screenshot", s.wrap(serve, true))
	}
	s.mux.Handle("/", s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return errorf(http.StatusNotFound, computerd.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}, false))
}

// route registers h for one path and method; other methods answer 405.
func (s *Server) route(path, method string, h handlerFunc, auth bool) {
	s.mux.Handle(path, s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		if r.Method != method {
			w.Header().Set("Allow", method)
			return errorf(http.StatusMethodNotAllowed, computerd.CodeBadRequest, "%s %s: use %s", r.Method, path, method)
		}
		return h(w, r)
	}, auth))
}

// wrap adds authentication and error answers to h. No answer of computerd
// is to be cached.
func (s *Server) wrap(h handlerFunc, auth bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if auth && !s.authorized(r) {
			msg := "missing or wrong bearer token"
			if !s.Bound() {
				msg = "this computer is not bound to a session: it serves only health and bind"
			}
			writeError(w, errorf(http.StatusUnauthorized, computerd.CodeUnauthorized, "%s", msg))
			return
		}
		err := h(w, r)
		if err == nil {
			return
		}
		var ae *httpjson.Error
		if !errors.As(err, &ae) {
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			ae = errorf(http.StatusInternalServerError, computerd.CodeInternal, "%v", err)
		}
		writeError(w, ae)
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, errorf(http.StatusInternalServerError, computerd.CodeInternal, "internal error"))
		}
	}()
	s.mux.ServeHTTP(w, r)
}

func (s *Server) authorized(r *http.Request) bool {
	want := s.tokenHash()
	if want == "" {
		return false
	}
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	return token.Check(strings.TrimSpace(h[len(prefix):]), want)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	h := computerd.Health{Status: "ok", Version: s.cfg.Version, ComputerID: s.cfg.ComputerID}
	if s.cfg.Screen != nil {
		h.Screen = s.cfg.Screen()
	}
	httpjson.Write(w, http.StatusOK, h)
	return nil
}

// Shutdown refuses new commands and waits until the running ones have
// finished or ctx is done; then it kills whatever still runs.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := len(s.children)
		s.mu.Unlock()
		if n == 0 {
			s.closeBrowser()
			return nil
		}
		select {
		case <-ctx.Done():
			s.Close()
			return fmt.Errorf("shutdown with %d commands running: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

// Close refuses new commands and kills the process group of every command
// still running. Processes that a finished command left in the background
// are not touched.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.trim != nil {
		s.trim.Stop()
	}
	var pids []int
	for pid := range s.children {
		pids = append(pids, pid)
	}
	s.mu.Unlock()
	for _, pid := range pids {
		killTree(pid)
	}
	s.closeBrowser()
	return nil
}

// closeBrowser stops the browser, if one runs.
func (s *Server) closeBrowser() {
	if s.browser != nil {
		s.browser.Close()
	}
}

func errorf(status int, code, format string, args ...any) *httpjson.Error {
	return &httpjson.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusBadRequest, computerd.CodeBadRequest, format, args...)
}

func writeError(w http.ResponseWriter, e *httpjson.Error) {
	httpjson.WriteError(w, e.Status, e.Code, e.Message)
}

// decodeJSON reads a JSON request body of at most limit bytes into v.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge, "request body over %d bytes", limit)
		}
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}

// signals are the signals a request may name, with or without "SIG".
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT,
	"KILL": syscall.SIGKILL, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2, "STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT,
	"TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH, "ALRM": syscall.SIGALRM,
	"PIPE": syscall.SIGPIPE,
}

// parseSignal maps a signal name ("TERM", "SIGTERM", "term") to a signal;
// an empty name is TERM.
func parseSignal(name string) (syscall.Signal, bool) {
	if name == "" {
		return syscall.SIGTERM, true
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	return sig, ok
}
