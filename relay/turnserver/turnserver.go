// Package turnserver is the relay's TURN server for live view
// (github.com/pion/turn/v5): UDP, TCP and TLS listeners handed in by the
// caller, ephemeral REST credentials derived from TURN_SECRET, quotas of
// allocations per user, and peers restricted to the server's own relayed
// addresses. Viewers and computers both relay through it, so a relay only
// ever talks to another relay of the same server: the server never reaches
// another host, nor another service on its own address.
package turnserver

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/stun/v4"
	"github.com/pion/turn/v5"

	"github.com/berthdev/berth/internal/clock"
)

// Defaults of Config.
const (
	DefaultRealm          = "berth"
	DefaultUserQuota      = 8
	DefaultPort           = 3478
	DefaultTLSPort        = 5349
	defaultMaxAllocations = 1024
)

// Config configures a Server.
type Config struct {
	// Secret is TURN_SECRET, shared with whoever issues credentials.
	Secret []byte
	// Realm is the TURN realm (default DefaultRealm).
	Realm string
	// RelayIP is the server's own address: relayed sockets bind to it and
	// are announced with it. It must be an address of this host that both
	// viewers and computers reach.
	RelayIP netip.Addr
	// PacketConns are UDP listeners; Listeners are TCP listeners, TLS ones
	// already wrapped (crypto/tls.NewListener).
	PacketConns []net.PacketConn
	Listeners   []net.Listener
	// UserQuota is how many allocations one credential id may hold at once
	// (default DefaultUserQuota).
	UserQuota int
	// MaxAllocations bounds all allocations together (default 1024).
	MaxAllocations int
	// MaxConns bounds the TCP and TLS connections in all, MaxConnsPerIP
	// those from one address (defaults DefaultMaxConns and
	// DefaultMaxConnsPerIP). A connection that sends nothing for
	// FirstByteTimeout after it opens, or for IdleTimeout later, is closed
	// (defaults DefaultFirstByteTimeout and DefaultIdleTimeout).
	MaxConns, MaxConnsPerIP       int
	FirstByteTimeout, IdleTimeout time.Duration
	Clock                         clock.Clock
	Logger                        *slog.Logger
}

// Server is a running TURN server.
type Server struct {
	cfg    Config
	log    *slog.Logger
	turn   *turn.Server
	relays *relays
	conns  *connLimits

	mu     sync.Mutex
	users  map[string]int // allocations by credential id
	total  int
	denied atomic.Int64 // refused permissions and dropped packets
}

// New starts a TURN server on the given listeners. Close stops it and
// closes them.
func New(cfg Config) (*Server, error) {
	if len(cfg.Secret) < 16 {
		return nil, ErrBadSecret
	}
	if !cfg.RelayIP.IsValid() {
		return nil, ErrNoRelayIP
	}
	if len(cfg.PacketConns) == 0 && len(cfg.Listeners) == 0 {
		return nil, ErrNoListeners
	}
	cfg.Realm = cmp.Or(cfg.Realm, DefaultRealm)
	if cfg.UserQuota <= 0 {
		cfg.UserQuota = DefaultUserQuota
	}
	if cfg.MaxAllocations <= 0 {
		cfg.MaxAllocations = defaultMaxAllocations
	}
	cfg.MaxConns = cmp.Or(max(cfg.MaxConns, 0), DefaultMaxConns)
	cfg.MaxConnsPerIP = cmp.Or(max(cfg.MaxConnsPerIP, 0), DefaultMaxConnsPerIP)
	cfg.FirstByteTimeout = cmp.Or(max(cfg.FirstByteTimeout, 0), DefaultFirstByteTimeout)
	cfg.IdleTimeout = cmp.Or(max(cfg.IdleTimeout, 0), DefaultIdleTimeout)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "turn"),
		users: map[string]int{},
	}
	s.relays = &relays{ip: cfg.RelayIP.Unmap(), ports: map[int]*relayConn{}, denied: &s.denied, log: s.log}
	gen := &relayGen{r: s.relays}
	perm := s.permission
	sc := turn.ServerConfig{
		Realm:         cfg.Realm,
		AuthHandler:   s.authenticate,
		QuotaHandler:  s.quota,
		LoggerFactory: pionLogs{s.log},
		EventHandler: turn.EventHandler{
			OnAllocationCreated: func(_, _ net.Addr, _, user, _ string, relay net.Addr, _ int) {
				s.log.Debug("allocation", "user", user, "relay", relay.String())
			},
			OnAllocationDeleted: func(_, _ net.Addr, _, user, _ string) { s.release(user) },
		},
	}
	for _, pc := range cfg.PacketConns {
		sc.PacketConnConfigs = append(sc.PacketConnConfigs, turn.PacketConnConfig{PacketConn: pc, RelayAddressGenerator: gen, PermissionHandler: perm})
	}
	s.conns = &connLimits{max: cfg.MaxConns, perIP: cfg.MaxConnsPerIP, firstByte: cfg.FirstByteTimeout, idle: cfg.IdleTimeout, byIP: map[netip.Addr]int{}}
	for _, ln := range cfg.Listeners {
		ln = limitedListener{Listener: ln, l: s.conns}
		sc.ListenerConfigs = append(sc.ListenerConfigs, turn.ListenerConfig{Listener: ln, RelayAddressGenerator: gen, PermissionHandler: perm})
	}
	ts, err := turn.NewServer(sc)
	if err != nil {
		return nil, fmt.Errorf("turn server: %w", err)
	}
	s.turn = ts
	return s, nil
}

// Close stops the server and closes its listeners and relays.
func (s *Server) Close() error { return s.turn.Close() }

// Allocations returns the number of live allocations.
func (s *Server) Allocations() int { return s.turn.AllocationCount() }

// Denied counts refused permissions and relayed packets dropped because
// their peer was not one of the server's relays.
func (s *Server) Denied() int64 { return s.denied.Load() }

// Conns returns the open TCP and TLS connections, and how many were
// refused at the limits and closed for silence since the start.
func (s *Server) Conns() (open int, refused, timedOut int64) {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.conns.n, s.conns.refused, s.conns.timedOut
}

// RelayIP returns the address relays are announced with.
func (s *Server) RelayIP() netip.Addr { return s.cfg.RelayIP }

// Issue makes credentials for id with the server's secret and clock.
func (s *Server) Issue(id string, ttl time.Duration) (Credentials, error) {
	return Issue(s.cfg.Secret, id, s.cfg.Clock.Now(), ttl)
}

// authenticate checks REST credentials: "expiry:id", not expired (a
// refresh of an existing allocation gets RefreshGrace), not further ahead
// than MaxTTL, and the HMAC password. The id is the user that quotas count.
func (s *Server) authenticate(ra *turn.RequestAttributes) (string, []byte, bool) {
	var grace time.Duration
	if ra.Method != stun.MethodAllocate {
		grace = RefreshGrace
	}
	id, ok := parseUser(ra.Username, s.cfg.Clock.Now(), grace)
	if !ok {
		s.log.Info("turn credential refused", "src", fmt.Sprint(ra.SrcAddr), "reason", "expired or malformed username")
		return "", nil, false
	}
	return id, turn.GenerateAuthKey(ra.Username, ra.Realm, password(s.cfg.Secret, ra.Username)), true
}

// quota admits an allocation when the user and the server are under their
// limits, and counts it.
func (s *Server) quota(user, _ string, src net.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[user] >= s.cfg.UserQuota || s.total >= s.cfg.MaxAllocations {
		s.log.Info("turn allocation refused: quota", "user", user, "src", fmt.Sprint(src), "held", s.users[user], "quota", s.cfg.UserQuota)
		return false
	}
	s.users[user]++
	s.total++
	return true
}

func (s *Server) release(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[user] == 0 {
		return
	}
	s.total--
	if s.users[user]--; s.users[user] == 0 {
		delete(s.users, user)
	}
}

// permission allows only the server's own relay address as a peer.
func (s *Server) permission(client net.Addr, peer net.IP) bool {
	ip, ok := netip.AddrFromSlice(peer)
	if ok && ip.Unmap() == s.relays.ip {
		return true
	}
	s.denied.Add(1)
	s.log.Info("turn permission refused", "client", client.String(), "peer", peer.String())
	return false
}
