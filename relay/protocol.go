package relay

import (
	"context"
	"io"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/berthdev/berth/internal/clock"
)

const (
	// ConnectPath is where a relay accepts agents' websocket connections.
	ConnectPath = "/v1/agents/connect"
	// VersionHeader carries the agent's version on the connect request.
	VersionHeader = "Berth-Agent-Version"
	// Subprotocol is the websocket subprotocol spoken on the link.
	Subprotocol = "berth-relay.v1"
)

// Defaults for link liveness.
const (
	DefaultPingInterval = 15 * time.Second
	DefaultPingTimeout  = 10 * time.Second
)

// BearerToken returns the token from an Authorization header value, or ""
// when the value is not a bearer token.
func BearerToken(header string) string {
	const prefix = "bearer "
	if len(header) <= len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(header[len(prefix):])
}

// MuxConfig returns the yamux settings used on both ends of the link.
// Liveness is driven by [Heartbeat], so yamux's own keepalive is off;
// pingTimeout also bounds how long a write may stall before the session is
// declared dead.
func MuxConfig(pingTimeout time.Duration) *yamux.Config {
	if pingTimeout <= 0 {
		pingTimeout = DefaultPingTimeout
	}
	cfg := yamux.DefaultConfig()
	cfg.AcceptBacklog = 64
	// A larger window than the 256 KB default lets bulk transfers keep the
	// link busy; it bounds what one stream may buffer on the receiving side.
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.EnableKeepAlive = false
	cfg.ConnectionWriteTimeout = pingTimeout
	cfg.StreamOpenTimeout = 30 * time.Second
	cfg.StreamCloseTimeout = time.Minute
	cfg.LogOutput = io.Discard
	return cfg
}

// Heartbeat pings the peer every interval on the clock c until ctx ends or
// the session closes. Each answered ping is reported to seen with the
// clock's time. A ping that fails or is not answered within the session's
// write timeout closes the session. Heartbeat returns when the session is
// closed or ctx ends; it closes the session in both cases.
func Heartbeat(ctx context.Context, s *yamux.Session, c clock.Clock, interval time.Duration, seen func(time.Time)) {
	defer s.Close()
	if interval <= 0 {
		interval = DefaultPingInterval
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.CloseChan():
			return
		case <-c.After(interval):
		}
		if _, err := s.Ping(); err != nil {
			return
		}
		if seen != nil {
			seen(c.Now())
		}
	}
}

// Presence is what a relay knows about a lending agent's link: the lender
// it serves (its companion id from pairing), whether it is connected, since
// when, when it was last heard from and the version it reported.
type Presence struct {
	LenderID    string
	Online      bool
	ConnectedAt time.Time // start of the current (or last) connection
	LastSeen    time.Time // last connect, answered ping, or disconnect
	Version     string    // as reported by the agent when it connected
}

// Addr is the net.Addr of a relayed connection: the agent it leads to.
type Addr string

// Network implements net.Addr.
func (Addr) Network() string { return "berth-relay" }

// String implements net.Addr.
func (a Addr) String() string { return string(a) }

var _ net.Addr = Addr("")
