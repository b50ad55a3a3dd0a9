// Package fakeapi holds what the local fakes of hosted providers share: an
// HTTP server wrapper that plays the documented bad days (refused
// credentials, 429, 5xx, a reply lost after an accepted create, deletes
// that fail), a log of the requests it served for assertions, and real
// in-process computerd servers that stand in for each fake machine, so
// that exec and file calls do real work through the provider's path.
package fakeapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/computerd/server"
)

// Kind sorts the calls of an API, so that faults hit the right ones.
type Kind int

// Kinds of calls.
const (
	Other  Kind = iota
	Create      // a call that creates a machine
	Delete      // a call that removes one
	List        // a call that lists machines
)

// Options describe the API a Server fronts.
type Options struct {
	// Authorized reports whether a request carries the account's
	// credentials. Nil accepts every request.
	Authorized func(r *http.Request) bool
	// Kind sorts a request; nil makes every request Other.
	Kind func(r *http.Request) Kind
	// WriteError writes the API's own error body for status. Nil writes
	// {"code": status, "message": msg}.
	WriteError func(w http.ResponseWriter, status int, msg string)
	// Logger receives a line per request; nil discards.
	Logger *slog.Logger
}

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	Status int // the status answered; 0 when the reply was dropped
}

// Server is an httptest server in front of a fake API's handler.
type Server struct {
	*httptest.Server
	opts Options

	mu          sync.Mutex
	refuse      bool
	loseCreates int
	failDeletes int
	failNext    []int // statuses the next requests answer, in order
	echo        bool
	requests    []Request
}

// New starts a server that serves h behind the fault injection. It is
// closed when the test ends.
func New(t interface{ Cleanup(func()) }, h http.Handler, opts Options) *Server {
	if opts.Kind == nil {
		opts.Kind = func(*http.Request) Kind { return Other }
	}
	if opts.WriteError == nil {
		opts.WriteError = func(w http.ResponseWriter, status int, msg string) {
			WriteJSON(w, status, map[string]any{"code": status, "message": msg})
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts}
	s.Server = httptest.NewServer(s.wrap(h))
	t.Cleanup(s.Close)
	return s
}

// RefuseCredentials makes every request answer 401 while on.
func (s *Server) RefuseCredentials(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

// EchoHeaders makes the error answers the server plays (refused
// credentials, FailNext, failing deletes) repeat the request's header
// values in their message while on, as a careless API echoes the key it
// refused: a provider must keep them out of its errors and logs.
func (s *Server) EchoHeaders(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.echo = on
}

// LoseNextCreateReply makes the next create run to completion and its
// reply be lost: the connection is closed before a byte is answered.
func (s *Server) LoseNextCreateReply() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseCreates++
}

// FailNextDeletes makes the next n deletes answer 500 without deleting.
func (s *Server) FailNextDeletes(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failDeletes += n
}

// FailNext makes the next requests answer the given statuses (429, 503,
// ...) in order, without reaching the API.
func (s *Server) FailNext(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, statuses...)
}

// Requests returns the requests served so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many requests served so far match.
func (s *Server) Count(match func(Request) bool) int {
	n := 0
	for _, q := range s.Requests() {
		if match(q) {
			n++
		}
	}
	return n
}

func (s *Server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
		kind := s.opts.Kind(r)

		s.mu.Lock()
		var status int
		var msg string
		switch {
		case s.refuse || (s.opts.Authorized != nil && !s.opts.Authorized(r)):
			status, msg = http.StatusUnauthorized, "invalid credentials"
		case len(s.failNext) > 0:
			status, msg = s.failNext[0], http.StatusText(s.failNext[0])
			s.failNext = s.failNext[1:]
		case kind == Delete && s.failDeletes > 0:
			s.failDeletes--
			status, msg = http.StatusInternalServerError, "internal error while deleting"
		}
		if status != 0 && s.echo {
			var sent []string
			for _, v := range r.Header {
				sent = append(sent, v...)
			}
			msg += " (sent " + strings.Join(sent, ", ") + ")"
		}
		lose := status == 0 && kind == Create && s.loseCreates > 0
		if lose {
			s.loseCreates--
		}
		s.mu.Unlock()

		recorded := false
		record := func() {
			if recorded {
				return
			}
			recorded = true
			s.mu.Lock()
			s.requests = append(s.requests, rec)
			s.mu.Unlock()
			s.opts.Logger.Debug("fake api", "method", r.Method, "path", r.URL.Path, "status", rec.Status)
		}
		defer record()
		if status != 0 {
			rec.Status = status
			s.opts.WriteError(w, status, msg)
			return
		}
		if lose {
			// Run the create to the end, then drop the connection; the
			// request is on the log before the client can see the drop.
			rw := httptest.NewRecorder()
			h.ServeHTTP(rw, r)
			record()
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		rec.Status = sw.status
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return s.ResponseWriter.(http.Hijacker).Hijack()
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Computer is a real computerd serving one fake machine on loopback.
type Computer struct {
	// URL is computerd's base URL (http://127.0.0.1:PORT).
	URL string
	// Env is the machine's environment, as its processes see it.
	Env  map[string]string
	srv  *http.Server
	home string
	desk *desktop.Desktop // nil without a screen
}

// StartComputer starts a computerd whose home is a fresh folder under
// dir, accepting only the token that hashes to tokenHash, whose commands
// see env as their environment (as a hosted machine's processes see the
// variables it was created with). When env has BERTH_DESKTOP=1 and a
// DISPLAY, as a machine made from a desktop image has, computerd also
// serves that X display's desktop (screenshots, the desktop tools and live
// view), as it does in the image.
func StartComputer(dir, tokenHash string, env map[string]string) (*Computer, error) {
	home, err := os.MkdirTemp(dir, "machine-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(home)
		return nil, err
	}
	cfg := server.Config{TokenHash: tokenHash, Home: home, Version: "fakeapi", Env: env}
	var desk *desktop.Desktop
	if env[desktop.EnvDesktop] == "1" && env["DISPLAY"] != "" {
		dc, err := desktop.ConfigFromEnv(func(k string) string { return env[k] })
		if err != nil {
			ln.Close()
			os.RemoveAll(home)
			return nil, err
		}
		desk = desktop.New(dc)
		cfg.Desktop = desk
	}
	h := server.New(cfg)
	c := &Computer{URL: "http://" + ln.Addr().String(), Env: env, home: home, desk: desk,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go c.srv.Serve(ln)
	return c, nil
}

// Close stops the computer and removes its home.
func (c *Computer) Close() {
	if c == nil { // a machine whose computerd never started
		return
	}
	c.srv.Close()
	if c.desk != nil {
		c.desk.Close()
	}
	os.RemoveAll(c.home)
}

// ReverseTo returns a handler that forwards every request to the computer
// at base (http://127.0.0.1:PORT), as a provider's proxy forwards traffic
// to a machine's port.
func ReverseTo(base string, tr http.RoundTripper) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.ContentLength = r.ContentLength
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, "machine unreachable", http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
}

// HostTransport returns a transport that sends requests for any host
// ending in suffix (a fake provider's sandbox domain, such as
// ".e2b.test") to addr, and every other request normally. The fakes serve
// their machines' public URLs behind one listener this way.
func HostTransport(suffix, addr string) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(a)
			if err == nil && strings.HasSuffix(host, suffix) {
				a = addr
			}
			return d.DialContext(ctx, network, a)
		},
		MaxIdleConnsPerHost: 16,
	}
}
