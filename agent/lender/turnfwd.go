package lender

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/berthdev/berth/agent/turnfwd"
	"github.com/berthdev/berth/providers/docker"
)

// A lent computer's network is internal; the agent forwards a port on its
// docker0 address to the TURN relay (liveview.go says which) and gives
// desktop computers the forwarder's address (package turnfwd).

// turnState is the lender's TURN forwarder, started with the first lent
// desktop whose relay computers cannot reach.
type turnState struct {
	mu     sync.Mutex
	fwd    *turnfwd.Forwarder
	closed bool
	// The relay, resolved on first use (turnTarget).
	resolved  bool
	relay     netip.Addr
	relayPort int // Config.TURNRelay's port; 0 takes the supervisor's
	relayErr  error
}

// forwardTURN returns the forwarder to target, starting it on the docker0
// address the first time.
func (l *core) forwardTURN(target string) (*turnfwd.Forwarder, error) {
	l.turn.mu.Lock()
	defer l.turn.mu.Unlock()
	if l.turn.closed {
		return nil, ErrClosed
	}
	if l.turn.fwd != nil {
		l.turn.fwd.SetTarget(target)
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
	f, err := turnfwd.Start(host, target, l.log)
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
	f.Close()
	if l.cfg.CloseTURN != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.cfg.CloseTURN(ctx, f.Port()); err != nil {
			l.log.Warn("could not close the TURN forwarder's port in the host firewall", "port", f.Port(), "err", err)
		}
	}
}
