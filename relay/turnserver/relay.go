package turnserver

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/turn/v5"
)

var errTCPRelay = errors.New("turn: TCP relays are not offered")

// inboxSize is how many packets a relay holds for its client before it
// drops (a burst of a keyframe is a few dozen).
const inboxSize = 1024

// relays are the server's live relayed addresses. A relay only ever talks
// to another relay of this server, so relayed packets never touch the
// network: one relay hands them to the other in memory, with its own
// address as the source. Each relay still binds a UDP socket, so that its
// announced address is a real port that nothing else on the host holds;
// nothing is ever read from or sent on that socket.
type relays struct {
	ip     netip.Addr
	denied *atomic.Int64
	log    *slog.Logger

	mu    sync.Mutex
	ports map[int]*relayConn
}

func (r *relays) lookup(addr net.Addr) *relayConn {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return nil
	}
	ip, ok := netip.AddrFromSlice(ua.IP)
	if !ok || ip.Unmap() != r.ip {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ports[ua.Port]
}

// relayGen makes UDP relays on the relay address; TCP relays (RFC 6062)
// are refused.
type relayGen struct{ r *relays }

func (g *relayGen) Validate() error { return nil }

func (g *relayGen) AllocatePacketConn(conf turn.AllocateListenerConfig) (net.PacketConn, net.Addr, error) {
	network := "udp4"
	if g.r.ip.Is6() {
		network = "udp6"
	}
	pc, err := net.ListenPacket(network, net.JoinHostPort(g.r.ip.String(), strconv.Itoa(conf.RequestedPort)))
	if err != nil {
		return nil, nil, err
	}
	addr := pc.LocalAddr().(*net.UDPAddr)
	c := &relayConn{sock: pc, r: g.r, addr: addr, inbox: make(chan packet, inboxSize), done: make(chan struct{})}
	g.r.mu.Lock()
	g.r.ports[addr.Port] = c
	g.r.mu.Unlock()
	return c, addr, nil
}

func (g *relayGen) AllocateListener(turn.AllocateListenerConfig) (net.Listener, net.Addr, error) {
	return nil, nil, errTCPRelay
}

func (g *relayGen) AllocateConn(turn.AllocateConnConfig) (net.Conn, error) {
	return nil, errTCPRelay
}

type packet struct {
	data []byte
	from *net.UDPAddr
}

// relayConn is one relayed address.
type relayConn struct {
	sock  net.PacketConn // holds the port
	r     *relays
	addr  *net.UDPAddr
	inbox chan packet
	done  chan struct{}
	once  sync.Once

	mu       sync.Mutex
	deadline time.Time
}

// WriteTo hands p to the relay at addr; anything else is dropped.
func (c *relayConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	dst := c.r.lookup(addr)
	if dst == nil {
		c.r.denied.Add(1)
		c.r.log.Debug("turn relay dropped a packet to a non-relay peer", "peer", addr.String())
		return len(p), nil
	}
	dst.deliver(packet{data: append([]byte(nil), p...), from: c.addr})
	return len(p), nil
}

func (c *relayConn) deliver(pk packet) {
	select {
	case <-c.done:
	case c.inbox <- pk:
	default: // the client is not keeping up: drop, as a full socket would
	}
}

func (c *relayConn) ReadFrom(p []byte) (int, net.Addr, error) {
	c.mu.Lock()
	dl := c.deadline
	c.mu.Unlock()
	var timeout <-chan time.Time
	if !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case pk := <-c.inbox:
		return copy(p, pk.data), pk.from, nil
	case <-c.done:
		return 0, nil, net.ErrClosed
	case <-timeout:
		return 0, nil, os.ErrDeadlineExceeded
	}
}

func (c *relayConn) Close() error {
	c.once.Do(func() {
		c.r.mu.Lock()
		if c.r.ports[c.addr.Port] == c {
			delete(c.r.ports, c.addr.Port)
		}
		c.r.mu.Unlock()
		close(c.done)
		c.sock.Close()
	})
	return nil
}

func (c *relayConn) LocalAddr() net.Addr { return c.addr }

func (c *relayConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

func (c *relayConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *relayConn) SetWriteDeadline(time.Time) error { return nil }
