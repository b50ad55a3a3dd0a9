package lender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/berthdev/berth/agent/turnfwd"
	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
)

// Live view of a lent desktop computer. The supervisor signals to the
// computer's computerd through the relay link, like every other call. The
// computer reaches a TURN relay only through the agent's own forwarder on
// the docker0 address, at a port the agent picks and alone opens in the
// host firewall; the forwarder connects to the relay the owner configured
// (Config.TURNRelay), or else to the paired supervisor's own host. The
// supervisor's request says only that it wants live view and, in the
// second case, at which port of its host: the TURN_PUBLIC_HOST it names is
// never dialled and no port it names is ever opened. The owner watches
// through the supervisor's viewer page too: each desktop session of the
// control API carries an owner link, which the agent derives from the
// computer's token as it passes through (lending.OwnerViewKey).

// Variables the supervisor names its TURN relay in, and the computer
// finds the forwarder in.
const (
	envTURNHost = "TURN_PUBLIC_HOST"
	envTURNPort = "TURN_PORT"
)

// liveViewEnv readies a desktop computer's way to a TURN relay and returns
// its environment, the forwarder's address replacing the supervisor's. A
// failure leaves the computer without live view (and without the
// supervisor's TURN variables), not without a start.
func (l *core) liveViewEnv(ctx context.Context, r lending.CreateRequest, env map[string]string) map[string]string {
	if env[envTURNPort] == "" && env[envTURNHost] == "" {
		return env
	}
	named := net.JoinHostPort(env[envTURNHost], env[envTURNPort])
	delete(env, envTURNHost)
	delete(env, envTURNPort)
	if r.Image != providers.ImageDesktop {
		return env
	}
	port, err := strconv.Atoi(named[strings.LastIndexByte(named, ':')+1:])
	if err != nil || port < 1 || port > 65535 {
		l.log.Warn("desktop computer with a bad TURN_PORT; no live view", "computer", r.ComputerID, "named", named)
		return env
	}
	target, err := l.turnTarget(port)
	if err != nil {
		l.log.Warn("no live view for a lent desktop", "computer", r.ComputerID, "err", err)
		return env
	}
	if target.String() != named {
		l.log.Debug("TURN relay named by the supervisor not used", "computer", r.ComputerID, "named", named, "relay", target)
	}
	f, err := l.forwardTURN(target.String())
	if err != nil {
		l.log.Warn("could not forward TURN for a desktop computer; no live view", "computer", r.ComputerID, "err", err)
		return env
	}
	env[envTURNHost], env[envTURNPort] = f.Host(), strconv.Itoa(f.Port())
	if l.cfg.OpenTURN != nil {
		if err := l.cfg.OpenTURN(ctx, f.Port()); err != nil {
			l.log.Warn("could not open the TURN forwarder's port to computers in the host firewall; live view of this computer may fail", "computer", r.ComputerID, "port", f.Port(), "err", err)
		}
	}
	return env
}

// turnTarget is where the forwarder connects: Config.TURNRelay as the
// owner gave it, or the paired supervisor's host at port. Names are
// resolved once, on first use. The supervisor's host must be a public
// address (not in the egress proxy's blocked ranges, not one of this
// machine's): a supervisor on a private network needs --turn-relay, the
// owner's explicit word.
func (l *core) turnTarget(port int) (netip.AddrPort, error) {
	l.turn.mu.Lock()
	defer l.turn.mu.Unlock()
	if !l.turn.resolved {
		l.turn.resolved = true
		l.turn.relay, l.turn.relayPort, l.turn.relayErr = l.resolveTURNRelay()
	}
	if l.turn.relayErr != nil {
		return netip.AddrPort{}, l.turn.relayErr
	}
	if l.turn.relayPort != 0 {
		port = l.turn.relayPort
	}
	return netip.AddrPortFrom(l.turn.relay, uint16(port)), nil
}

func (l *core) resolveTURNRelay() (netip.Addr, int, error) {
	if hp := l.cfg.TURNRelay; hp != "" {
		a, err := turnfwd.ParseRelay(hp)
		return a.Addr(), int(a.Port()), err
	}
	u, err := url.Parse(l.cfg.Pairing.URL)
	if err != nil || u.Hostname() == "" {
		return netip.Addr{}, 0, errors.New("not paired with a supervisor URL, and no --turn-relay")
	}
	a, err := turnfwd.ResolveOne(u.Hostname())
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("the paired supervisor's host %s: %w", u.Hostname(), err)
	}
	if egress.Blocked(a, nil) || ownAddress(a) {
		return netip.Addr{}, 0, fmt.Errorf("the paired supervisor's host %s is %s, a private address or this machine's own; "+
			"name its TURN relay with --turn-relay HOST:PORT", u.Hostname(), a)
	}
	return a, 0, nil
}

// ownAddress reports whether a is one of this machine's addresses; a list
// that cannot be read counts as ours.
func ownAddress(a netip.Addr) bool {
	as, err := egress.HostAddrs()
	return err != nil || slices.Contains(as, a.Unmap())
}

// viewURL is the owner link of a desktop session at the paired
// supervisor, or empty while the agent has not seen the computer's token
// (the supervisor's first call, at start, brings it) or is not paired.
func (l *core) viewURL(c *computer) string {
	base := strings.TrimRight(l.cfg.Pairing.URL, "/")
	if c.s.Image != providers.ImageDesktop || c.s.SessionID == "" || base == "" {
		return ""
	}
	c.mu.Lock()
	tok := c.token
	c.mu.Unlock()
	if tok == "" {
		return ""
	}
	return base + "/view/" + url.PathEscape(c.s.SessionID) + "/owner?key=" + lending.OwnerViewKey(tok, c.s.SessionID)
}
