// Package turnfwd forwards a TURN relay to computers whose network reaches
// only their host. A lent or tunnelled computer's network is internal:
// from it, only the host's own addresses are reachable (through the
// network's gateway). The host's agent forwards one port on its docker0
// address, UDP and TCP, to a TURN relay its owner chose and gives desktop
// computers the forwarder's address. The forwarder reaches nothing but
// that relay, and the relay sees the agent as the TURN client; TURN's
// integrity checks do not cover transport addresses, so credentials,
// allocations and permissions stay the computer's own.
package turnfwd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/hostnet"
)

// Bounds of the TURN forwarder.
const (
	maxFlows    = 256              // UDP clients and TCP connections, each
	idleFlow    = 10 * time.Minute // a UDP flow with no packet for this long is dropped
	dialTimeout = 10 * time.Second
)

// Forwarder forwards UDP and TCP on one port to the relay at its target.
type Forwarder struct {
	log  *slog.Logger
	pc   net.PacketConn
	ln   net.Listener
	host string // the address computers reach it on
	port int
	wg   sync.WaitGroup

	mu     sync.Mutex
	target string // the relay, host:port
	flows  map[string]*udpFlow
	conns  map[net.Conn]struct{}
	closed bool
}

type udpFlow struct {
	up   net.Conn
	last time.Time // guarded by Forwarder.mu
}

// Start listens on host (an IPv4 address of this machine) on a port free
// for both UDP and TCP, and forwards what arrives there to target.
func Start(host, target string, log *slog.Logger) (*Forwarder, error) {
	pc, ln, err := hostnet.ListenUDPTCP(host, "0")
	if err != nil {
		return nil, fmt.Errorf("TURN forwarder: %w", err)
	}
	f := &Forwarder{
		log: log, pc: pc, ln: ln, host: host, port: pc.LocalAddr().(*net.UDPAddr).Port,
		target: target, flows: map[string]*udpFlow{}, conns: map[net.Conn]struct{}{},
	}
	f.wg.Add(2)
	go f.serveUDP()
	go f.serveTCP()
	f.log.Info("forwarding TURN for desktop computers", "listen", net.JoinHostPort(host, strconv.Itoa(f.port)), "relay", target)
	return f, nil
}

// SetTarget points new flows at target (the relay moved).
func (f *Forwarder) SetTarget(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.target != target {
		f.log.Info("TURN forwarder: the relay moved", "relay", target)
		f.target = target
	}
}

func (f *Forwarder) serveUDP() {
	defer f.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, src, err := f.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		fl := f.flow(src)
		if fl == nil {
			continue
		}
		fl.up.Write(buf[:n])
	}
}

// flow returns src's flow to the relay, dialling one when it has none.
func (f *Forwarder) flow(src net.Addr) *udpFlow {
	key := src.String()
	f.mu.Lock()
	if fl := f.flows[key]; fl != nil {
		fl.last = time.Now()
		f.mu.Unlock()
		return fl
	}
	if f.closed || len(f.flows) >= maxFlows {
		f.mu.Unlock()
		return nil
	}
	target := f.target
	f.mu.Unlock()
	up, err := net.DialTimeout("udp", target, dialTimeout)
	if err != nil {
		f.log.Warn("TURN forwarder: cannot reach the relay", "relay", target, "err", err)
		return nil
	}
	fl := &udpFlow{up: up, last: time.Now()}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		up.Close()
		return nil
	}
	f.flows[key] = fl
	f.wg.Add(1)
	f.mu.Unlock()
	go f.back(key, src, fl)
	return fl
}

// back copies the relay's packets to the computer until the flow idles.
func (f *Forwarder) back(key string, src net.Addr, fl *udpFlow) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		if f.flows[key] == fl {
			delete(f.flows, key)
		}
		f.mu.Unlock()
		fl.up.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		fl.up.SetReadDeadline(time.Now().Add(idleFlow))
		n, err := fl.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				f.mu.Lock()
				idle := time.Since(fl.last) >= idleFlow
				f.mu.Unlock()
				if !idle {
					continue
				}
			}
			return
		}
		f.mu.Lock()
		fl.last = time.Now()
		f.mu.Unlock()
		if _, err := f.pc.WriteTo(buf[:n], src); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

func (f *Forwarder) serveTCP() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.closed || len(f.conns) >= maxFlows {
			f.mu.Unlock()
			c.Close()
			continue
		}
		f.conns[c] = struct{}{}
		target := f.target
		f.wg.Add(1)
		f.mu.Unlock()
		go f.pipe(c, target)
	}
}

// pipe joins a computer's TCP connection to one of its own to the relay.
func (f *Forwarder) pipe(c net.Conn, target string) {
	defer f.wg.Done()
	var up net.Conn
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		if up != nil {
			delete(f.conns, up)
		}
		f.mu.Unlock()
		c.Close()
		if up != nil {
			up.Close()
		}
	}()
	up, err := net.DialTimeout("tcp", target, dialTimeout)
	if err != nil {
		f.log.Warn("TURN forwarder: cannot reach the relay", "relay", target, "err", err)
		up = nil
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.conns[up] = struct{}{}
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// Close stops the forwarder and every flow, and waits for them.
func (f *Forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	for _, fl := range f.flows {
		fl.up.Close()
	}
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.pc.Close()
	f.ln.Close()
	f.wg.Wait()
}

// Host is the address computers reach the forwarder on.
func (f *Forwarder) Host() string { return f.host }

// Target is the relay new flows go to.
func (f *Forwarder) Target() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.target
}

// Port is the forwarder's port, the same for UDP and TCP.
func (f *Forwarder) Port() int { return f.port }

// ParseRelay checks a relay named as HOST:PORT, as an owner gives it
// (--turn-relay), and resolves it to one address, IPv4 first, within ten
// seconds.
func ParseRelay(hp string) (netip.AddrPort, error) {
	host, ps, err := net.SplitHostPort(hp)
	port, perr := strconv.Atoi(ps)
	if err != nil || perr != nil || port < 1 || port > 65535 || host == "" {
		return netip.AddrPort{}, fmt.Errorf("TURN relay %q: want host:port", hp)
	}
	a, err := ResolveOne(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("TURN relay %q: %w", hp, err)
	}
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// ResolveOne resolves host to one address, IPv4 first, within 10 seconds.
func ResolveOne(host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, cmp.Or(err, errors.New("no address")))
	}
	for _, a := range as {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return as[0], nil
}
