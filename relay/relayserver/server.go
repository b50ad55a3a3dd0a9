// Package relayserver is the relay's side of the agent link: it accepts
// agents' outbound websocket connections, multiplexes streams over them, and
// lets the supervisor reach an agent's HTTP API by agent id.
package relayserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/relay"
)

// Config configures a Server.
type Config struct {
	// Authenticate maps a lending agent's token to the lender's id (its
	// companion id from pairing). Required.
	Authenticate func(token string) (lenderID string, ok bool)
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Clock supplies presence times and ping intervals; nil is the system
	// clock.
	Clock clock.Clock
	// PingInterval is how often each agent is pinged.
	// Zero means relay.DefaultPingInterval.
	PingInterval time.Duration
	// PingTimeout is how long a ping (or a stalled write) may take before
	// the link is declared dead. Zero means relay.DefaultPingTimeout.
	PingTimeout time.Duration
	// OnPresence, if set, is called after every presence change (connect,
	// disconnect), for reporting to the supervisor's store. It must not
	// block for long.
	OnPresence func(Presence)
}

// Presence is what the relay knows about a lending agent (relay.Presence).
type Presence = relay.Presence

// Server accepts agent connections and dials agents by id. It is an
// http.Handler for the agents' websocket endpoint (relay.ConnectPath).
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock

	mu         sync.Mutex
	closed     bool
	lenders    map[string]*lender
	transports map[string]*http.Transport
	// changed wakes Report after a presence change.
	changed chan struct{}
}

type lender struct {
	pres Presence
	sess *yamux.Session // nil when offline
}

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Authenticate == nil {
		panic("relayserver: Config.Authenticate is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	return &Server{
		cfg:        cfg,
		log:        log.With("component", "relay"),
		clock:      clk,
		lenders:    make(map[string]*lender),
		transports: make(map[string]*http.Transport),
		changed:    make(chan struct{}, 1),
	}
}

// ServeHTTP accepts one agent connection and serves it until it ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := relay.BearerToken(r.Header.Get("Authorization"))
	lenderID, ok := "", false
	if token != "" {
		lenderID, ok = s.cfg.Authenticate(token)
	}
	if !ok || lenderID == "" {
		s.log.Warn("agent refused: invalid token", "remote", r.RemoteAddr)
		http.Error(w, "invalid agent token", http.StatusUnauthorized)
		return
	}
	version := r.Header.Get(relay.VersionHeader)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:    []string{relay.Subprotocol},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Warn("agent websocket accept failed", "agent", lenderID, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	sess, err := yamux.Client(conn, relay.MuxConfig(s.cfg.PingTimeout))
	if err != nil {
		conn.Close()
		s.log.Error("agent session setup failed", "agent", lenderID, "err", err)
		return
	}
	if ok, dup := s.register(lenderID, version, sess); !ok {
		if dup {
			s.log.Warn("agent refused: another link of this lender is live", "agent", lenderID, "remote", r.RemoteAddr)
			ws.Close(websocket.StatusPolicyViolation, CloseReasonDuplicate)
		}
		sess.Close()
		return
	}
	s.log.Info("agent connected", "agent", lenderID, "version", version, "remote", r.RemoteAddr)
	relay.Heartbeat(ctx, sess, s.clock, s.cfg.PingInterval, func(t time.Time) { s.seen(lenderID, sess, t) })
	conn.Close()
	if s.unregister(lenderID, sess) {
		s.log.Info("agent disconnected", "agent", lenderID)
	}
}

// register makes sess the lender's link. A live link of the same lender
// is not replaced: the newcomer is refused (dup). A link that no longer
// answers a ping is replaced, so that an agent whose network dropped can
// come back at once.
func (s *Server) register(lenderID, version string, sess *yamux.Session) (ok, dup bool) {
	var checked *yamux.Session
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return false, false
		}
		a := s.lenders[lenderID]
		cur := (*yamux.Session)(nil)
		if a != nil {
			cur = a.sess
		}
		if cur == nil || cur == checked {
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		if live(cur) {
			return false, true
		}
		checked = cur
	}
	now := s.clock.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, false
	}
	a := s.lenders[lenderID]
	if a == nil {
		a = &lender{}
		s.lenders[lenderID] = a
	}
	if a.sess != nil && a.sess != checked {
		// Another link came in while this one was checking.
		s.mu.Unlock()
		return false, true
	}
	old := a.sess
	a.sess = sess
	a.pres = Presence{LenderID: lenderID, Online: true, ConnectedAt: now, LastSeen: now, Version: version}
	p := a.pres
	s.mu.Unlock()
	if old != nil {
		s.log.Info("agent reconnected, replacing its dead connection", "agent", lenderID)
		old.Close()
	}
	s.report(p)
	return true, false
}

// unregister marks the agent offline if sess is still its current session.
func (s *Server) unregister(lenderID string, sess *yamux.Session) bool {
	now := s.clock.Now()
	s.mu.Lock()
	a := s.lenders[lenderID]
	if a == nil || a.sess != sess {
		s.mu.Unlock()
		return false
	}
	a.sess = nil
	a.pres.Online = false
	a.pres.LastSeen = now
	p := a.pres
	s.mu.Unlock()
	s.report(p)
	return true
}

func (s *Server) seen(lenderID string, sess *yamux.Session, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.lenders[lenderID]; a != nil && a.sess == sess {
		a.pres.LastSeen = t
	}
}

func (s *Server) report(p Presence) {
	select {
	case s.changed <- struct{}{}:
	default:
	}
	if s.cfg.OnPresence != nil {
		s.cfg.OnPresence(p)
	}
}

// Presence returns what the relay knows about an agent; ok is false for an
// agent that has never connected to this relay.
func (s *Server) Presence(lenderID string) (p Presence, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.lenders[lenderID]
	if a == nil {
		return Presence{}, false
	}
	return a.pres, true
}

// Lenders returns the presence of every lending agent seen by this relay,
// sorted by lender id.
func (s *Server) Lenders() []Presence {
	s.mu.Lock()
	out := make([]Presence, 0, len(s.lenders))
	for _, a := range s.lenders {
		out = append(out, a.pres)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].LenderID < out[j].LenderID })
	return out
}

// Online reports how many agents are connected.
func (s *Server) Online() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.lenders {
		if a.sess != nil {
			n++
		}
	}
	return n
}

// Dial opens a stream to the agent's API. It fails with an error wrapping
// ErrLenderOffline when the agent is not connected.
func (s *Server) Dial(ctx context.Context, lenderID string) (net.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	var sess *yamux.Session
	var last time.Time
	if a := s.lenders[lenderID]; a != nil {
		sess, last = a.sess, a.pres.LastSeen
	}
	s.mu.Unlock()
	if sess == nil {
		return nil, &OfflineError{LenderID: lenderID, LastSeen: last}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := sess.OpenStream()
	if err != nil {
		if errors.Is(err, yamux.ErrSessionShutdown) {
			return nil, &OfflineError{LenderID: lenderID, LastSeen: last}
		}
		return nil, fmt.Errorf("dial agent %s: %w", lenderID, err)
	}
	return &stream{Stream: st, agent: relay.Addr(lenderID)}, nil
}

// stream gives a yamux stream addresses that name the agent.
type stream struct {
	*yamux.Stream
	agent relay.Addr
}

func (s *stream) RemoteAddr() net.Addr { return s.agent }

// Transport returns an HTTP transport whose connections go to the agent's
// API through the relay. Requests may use any host; the URL's host is not
// dialled. The same transport is returned for the same agent.
func (s *Server) Transport(lenderID string) http.RoundTripper {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.transports[lenderID]; t != nil {
		return t
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return s.Dial(ctx, lenderID)
		},
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // long execs are allowed; callers bound them with contexts
		DisableCompression:    true,
	}
	s.transports[lenderID] = t
	return t
}

// Close disconnects every agent and makes further dials fail. Agents'
// in-flight requests fail.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var sessions []*yamux.Session
	for _, a := range s.lenders {
		if a.sess != nil {
			sessions = append(sessions, a.sess)
		}
	}
	transports := s.transports
	s.transports = make(map[string]*http.Transport)
	s.mu.Unlock()
	for _, sess := range sessions {
		sess.Close()
	}
	for _, t := range transports {
		t.CloseIdleConnections()
	}
	return nil
}

var _ http.Handler = (*Server)(nil)
