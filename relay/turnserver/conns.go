package turnserver

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Bounds of TURN over TCP and TLS (Config.MaxConns and the rest).
const (
	DefaultMaxConns      = 1024
	DefaultMaxConnsPerIP = 32
	// DefaultFirstByteTimeout is how long a new connection may stay silent:
	// the TLS handshake, or the first STUN message, must begin by then.
	DefaultFirstByteTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a connection after this long without a byte
	// from its client. TURN clients refresh their allocations and
	// permissions every few minutes, and live view sends all the time.
	DefaultIdleTimeout = 6 * time.Minute
)

// connLimits holds the TCP and TLS connections of every listener to the
// bounds, so that nobody holds unlimited idle sockets in the supervisor's
// process: past MaxConns in all, or MaxConnsPerIP from one address, a new
// connection is closed at once.
type connLimits struct {
	max, perIP        int
	firstByte, idle   time.Duration
	mu                sync.Mutex
	n                 int
	byIP              map[netip.Addr]int
	refused, timedOut int64
}

func (l *connLimits) take(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max || l.byIP[a] >= l.perIP {
		l.refused++
		return false
	}
	l.n++
	l.byIP[a]++
	return true
}

func (l *connLimits) give(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.byIP[a]--; l.byIP[a] <= 0 {
		delete(l.byIP, a)
	}
}

// limitedListener applies connLimits to a listener's connections.
type limitedListener struct {
	net.Listener
	l *connLimits
}

func (ln limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a := remoteIP(c)
		if !ln.l.take(a) {
			c.Close()
			continue
		}
		ic := &idleConn{Conn: c, l: ln.l, ip: a}
		c.SetReadDeadline(time.Now().Add(ln.l.firstByte))
		return ic, nil
	}
}

func remoteIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// idleConn moves its read deadline on with every byte read, and gives its
// slot back when closed.
type idleConn struct {
	net.Conn
	l    *connLimits
	ip   netip.Addr
	once sync.Once
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.Conn.SetReadDeadline(time.Now().Add(c.l.idle))
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.l.mu.Lock()
		c.l.timedOut++
		c.l.mu.Unlock()
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.once.Do(func() { c.l.give(c.ip) })
	return c.Conn.Close()
}
