package turnserver

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/pion/turn/v5"
)

var errTCPRelay = errors.New("turn: TCP relays are not offered")

// relays knows the ports of the server's live relayed sockets. A relay
// sends only to, and accepts only from, another of them.
type relays struct {
	ip     netip.Addr
	denied *atomic.Int64
	log    *slog.Logger

	mu    sync.Mutex
	ports map[int]bool
}

func (r *relays) add(port int) {
	r.mu.Lock()
	r.ports[port] = true
	r.mu.Unlock()
}

func (r *relays) remove(port int) {
	r.mu.Lock()
	delete(r.ports, port)
	r.mu.Unlock()
}

// ours reports whether addr is one of the live relays.
func (r *relays) ours(addr net.Addr) bool {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ua.IP)
	if !ok || ip.Unmap() != r.ip {
		return false
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
	g.r.add(addr.Port)
	return &relayConn{PacketConn: pc, r: g.r, port: addr.Port}, addr, nil
}

func (g *relayGen) AllocateListener(turn.AllocateListenerConfig) (net.Listener, net.Addr, error) {
	return nil, nil, errTCPRelay
}

func (g *relayGen) AllocateConn(turn.AllocateConnConfig) (net.Conn, error) {
	return nil, errTCPRelay
}

// relayConn is a relayed socket that talks only to other relays.
type relayConn struct {
	net.PacketConn
	r    *relays
	port int
	once sync.Once
}

func (c *relayConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if !c.r.ours(addr) {
		c.r.denied.Add(1)
		c.r.log.Debug("turn relay dropped a packet to a non-relay peer", "peer", addr.String())
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

func (c *relayConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || c.r.ours(addr) {
			return n, addr, err
		}
		c.r.denied.Add(1)
	}
}

func (c *relayConn) Close() error {
	c.once.Do(func() { c.r.remove(c.port) })
	return c.PacketConn.Close()
}
