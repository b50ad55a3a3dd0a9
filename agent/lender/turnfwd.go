package lender

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/berthdev/berth/providers/docker"
)

// A lent computer's network is internal: from it, only this machine's own
// addresses are reachable (through the network's gateway). The agent
// forwards a port on its docker0 address, UDP and TCP, to the TURN relay
// (liveview.go says which) and gives desktop computers the forwarder's
// address. The forwarder reaches nothing but that relay, and the relay sees
// the agent as the TURN client; TURN's integrity checks do not cover
// transport addresses, so credentials, allocations and permissions are the
// computer's own.

// Bounds of the TURN forwarder.
const (
	turnFwdMaxFlows = 256              // UDP clients and TCP connections, each
	turnFwdIdle     = 10 * time.Minute // a UDP flow with no packet for this long is dropped
	turnFwdDial     = 10 * time.Second
)

// turnState is the lender's TURN forwarder, started with the first lent
// desktop whose relay computers cannot reach.
type turnState struct {
	mu     sync.Mutex
	fwd    *turnForward
	closed bool
	// The relay, resolved on first use (turnTarget).
	resolved  bool
	relay     netip.Addr
	relayPort int // Config.TURNRelay's port; 0 takes the supervisor's
	relayErr  error
}

// turnForward forwards UDP and TCP on one port to the relay at target.
type turnForward struct {
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
	last time.Time // guarded by turnForward.mu
}

// startTURNForward listens on host (an IPv4 address of this machine) on a
// port free for both UDP and TCP.
func startTURNForward(host, target string, log *slog.Logger) (*turnForward, error) {
	var pc net.PacketConn
	var ln net.Listener
	for range 10 {
		var err error
		if pc, err = net.ListenPacket("udp4", net.JoinHostPort(host, "0")); err != nil {
			return nil, err
		}
		port := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
		if ln, err = net.Listen("tcp4", net.JoinHostPort(host, port)); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		return nil, errors.New("TURN forwarder: no port free for both UDP and TCP")
	}
	f := &turnForward{
		log: log, pc: pc, ln: ln, host: host, port: pc.LocalAddr().(*net.UDPAddr).Port,
		target: target, flows: map[string]*udpFlow{}, conns: map[net.Conn]struct{}{},
	}
	f.wg.Add(2)
	go f.serveUDP()
	go f.serveTCP()
	f.log.Info("forwarding TURN for lent desktops", "listen", net.JoinHostPort(host, strconv.Itoa(f.port)), "relay", target)
	return f, nil
}

// setTarget points new flows at target (the supervisor's relay moved).
func (f *turnForward) setTarget(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.target != target {
		f.log.Info("TURN forwarder: the relay moved", "relay", target)
		f.target = target
	}
}

func (f *turnForward) serveUDP() {
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
func (f *turnForward) flow(src net.Addr) *udpFlow {
	key := src.String()
	f.mu.Lock()
	if fl := f.flows[key]; fl != nil {
		fl.last = time.Now()
		f.mu.Unlock()
		return fl
	}
	if f.closed || len(f.flows) >= turnFwdMaxFlows {
		f.mu.Unlock()
		return nil
	}
	target := f.target
	f.mu.Unlock()
	up, err := net.DialTimeout("udp", target, turnFwdDial)
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
func (f *turnForward) back(key string, src net.Addr, fl *udpFlow) {
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
		fl.up.SetReadDeadline(time.Now().Add(turnFwdIdle))
		n, err := fl.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				f.mu.Lock()
				idle := time.Since(fl.last) >= turnFwdIdle
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

func (f *turnForward) serveTCP() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.closed || len(f.conns) >= turnFwdMaxFlows {
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
func (f *turnForward) pipe(c net.Conn, target string) {
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
	up, err := net.DialTimeout("tcp", target, turnFwdDial)
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

// close stops the forwarder and every flow, and waits for them.
func (f *turnForward) close() {
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

// forwardTURN returns the forwarder to target, starting it on the docker0
// address the first time.
func (l *core) forwardTURN(target string) (*turnForward, error) {
	l.turn.mu.Lock()
	defer l.turn.mu.Unlock()
	if l.turn.closed {
		return nil, ErrClosed
	}
	if l.turn.fwd != nil {
		l.turn.fwd.setTarget(target)
		return l.turn.fwd, nil
	}
	host := l.cfg.TURNForwardHost
	if host == "" {
		ip, err := docker.BridgeIPv4()
		if err != nil {
			return nil, err
		}
		host = ip.String()
	}
	f, err := startTURNForward(host, target, l.log)
	if err != nil {
		return nil, err
	}
	l.turn.fwd = f
	return f, nil
}

// closeTURNForward stops the forwarder and closes its port in the host
// firewall; it runs when the lender closes.
func (l *core) closeTURNForward() {
	l.turn.mu.Lock()
	f := l.turn.fwd
	l.turn.fwd, l.turn.closed = nil, true
	l.turn.mu.Unlock()
	if f == nil {
		return
	}
	f.close()
	if l.cfg.CloseTURN != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.cfg.CloseTURN(ctx, f.port); err != nil {
			l.log.Warn("could not close the TURN forwarder's port in the host firewall", "port", f.port, "err", err)
		}
	}
}
