// Package mcpserver serves one agent's computer tools (computer_start,
// computer_exec, computer_read_file, computer_write_file, computer_stop and,
// for persistent computers, computer_checkpoint; on desktop computers
// computer_screenshot and computer_action) over the Model Context
// Protocol, on stdio or streamable HTTP. Each tool calls the supervisor's
// REST API through a api.Client.
//
// Every tool call carries an Idempotency-Key derived from the call itself:
// the MCP session, the connection and the JSON-RPC id of the tools/call
// request. A client that sends the same call again (the same id in the same
// session) gets the first outcome from the supervisor; a command never runs
// twice. See Server.Transport and Server.Handler, which make the call ids
// known to the tools.
package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
)

// DefaultShutdownTimeout bounds how long Run and Serve wait for running
// tool calls once their context ends.
const DefaultShutdownTimeout = 30 * time.Second

// httpSessionIdle is how long a streamable HTTP session may stay without
// requests before the server closes it; the client then starts a new one.
const httpSessionIdle = time.Hour

// Server serves the computer tools of one agent over MCP.
type Server struct {
	mcp      *mcp.Server
	c        *api.Client
	agent    string
	id       string // random, marks the call tags this Server sets
	log      *slog.Logger
	version  string
	shutdown time.Duration

	scale    desktopScale // of the last screenshot, for computer_action's coordinates
	pending  pending      // tool calls not answered yet
	draining atomic.Bool  // set when shutdown begins: new tool calls are refused
}

// Option configures a Server.
type Option func(*Server)

// WithLogger makes the server log to l.
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithVersion sets the version the server reports to MCP clients.
func WithVersion(v string) Option {
	return func(s *Server) { s.version = v }
}

// WithShutdownTimeout sets how long Run and Serve wait for running tool
// calls once their context ends (default DefaultShutdownTimeout).
func WithShutdownTimeout(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.shutdown = d
		}
	}
}

// New returns a server of the computer tools of agent, which it calls
// through c.
func New(c *api.Client, agent string, opts ...Option) *Server {
	s := &Server{
		c: c, agent: agent, id: randomID(),
		log:      slog.New(slog.DiscardHandler),
		version:  "dev",
		shutdown: DefaultShutdownTimeout,
	}
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With("component", "mcp", "agent", agent)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "berth", Title: "Berth computer", Version: s.version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.log,
	})
	s.addTools()
	s.addDesktopTools()
	s.addBrowserTools()
	return s
}

// MCP returns the underlying MCP server. Connect it through Transport, or
// serve it through Handler, so that tool calls get idempotency keys derived
// from their ids; otherwise every call gets a random key.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Transport wraps t so that the tools learn the JSON-RPC id of each call.
// Use it for stdio, in-memory and other transports connected with
// s.MCP().Connect; Run uses it itself.
func (s *Server) Transport(t mcp.Transport) mcp.Transport {
	return &taggingTransport{s: s, t: t}
}

// Run serves one MCP connection over t until the client disconnects or ctx
// ends. When ctx ends, Run refuses new tool calls, waits for the running
// ones to be answered (up to the shutdown timeout) and closes the
// connection; it returns nil after a clean end. The Server refuses tool
// calls from then on, on every connection.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	ss, err := s.mcp.Connect(ctx, s.Transport(t), nil)
	if err != nil {
		return err
	}
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case err := <-ended:
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("shutting down: waiting for running tool calls")
	timer := time.NewTimer(s.shutdown)
	defer timer.Stop()
	select {
	case <-s.pending.idle():
	case err := <-ended:
		return err
	case <-timer.C:
		go ss.Close()
		return ErrShutdownTimeout
	}
	ss.Close()
	<-ended
	return nil
}

// Handler returns the streamable HTTP endpoint of the tools. When token is
// set, every request must carry it as "Authorization: Bearer TOKEN".
// Browsers' cross-origin requests are refused, and so are requests that
// reach a loopback address under another host name (DNS rebinding). A
// session without requests for an hour is closed; its client starts a new
// one.
func (s *Server) Handler(token string) http.Handler {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:         s.log,
		SessionTimeout: httpSessionIdle,
	})
	h = s.tagRequests(h)
	if token != "" {
		h = requireBearer(token, h)
	}
	return http.NewCrossOriginProtection().Handler(h)
}

// requireBearer refuses requests that do not carry token as a bearer token.
func requireBearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth-mcp"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Path is where Serve answers MCP requests.
const Path = "/mcp"

// Serve serves the tools over streamable HTTP at Path on ln until ctx ends,
// then shuts down: it stops accepting connections, refuses new tool calls,
// waits for the running ones to be answered (up to the shutdown timeout),
// and closes every session. It refuses (ErrNoToken) to serve without a
// token unless ln listens on a loopback address. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener, token string) error {
	if token == "" && !loopback(ln.Addr()) {
		ln.Close()
		return ErrNoToken
	}
	mux := http.NewServeMux()
	mux.Handle(Path, s.Handler(token))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}

	s.draining.Store(true)
	s.log.Info("shutting down: waiting for running tool calls")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdown)
	defer cancel()
	// Shutdown closes the listener at once, then waits for the
	// connections to be idle, which the sessions' long-lived event streams
	// never are: those end when the sessions are closed, after the running
	// calls have been answered.
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		select {
		case <-s.pending.idle():
		case <-sctx.Done():
			return
		}
		s.closeSessions()
	}()
	var err error
	select {
	case err = <-shut:
	case <-sctx.Done():
		err = sctx.Err()
	}
	if err == nil {
		<-closed
		<-served
		return nil
	}
	srv.Close()
	// The sessions close once their calls end.
	go s.closeSessions()
	<-served
	return ErrShutdownTimeout
}

// closeSessions closes every session of the server. Each close waits for
// the session's running calls.
func (s *Server) closeSessions() {
	var wg sync.WaitGroup
	for ss := range s.mcp.Sessions() {
		wg.Go(func() { ss.Close() })
	}
	wg.Wait()
}

// loopback reports whether addr is a TCP address on a loopback interface.
func loopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// randomID returns a random identifier.
func randomID() string { return rand.Text() }
