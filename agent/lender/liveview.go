package lender

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
)

// Live view of a lent desktop computer. The supervisor signals to the
// computer's computerd through the relay link, like every other call, and
// gives the computer TURN_PUBLIC_HOST and TURN_PORT, its TURN relay; the
// agent opens that port to its computers in the host firewall. The owner
// watches through the supervisor's viewer page too: each desktop session
// of the control API carries an owner link, which the agent derives from
// the computer's token as it passes through (lending.OwnerViewKey).

// Variables the supervisor names its TURN relay in.
const (
	envTURNHost = "TURN_PUBLIC_HOST"
	envTURNPort = "TURN_PORT"
)

// liveViewEnv readies a desktop computer's way to the supervisor's TURN
// relay and returns its environment. A relay on this machine is reached
// straight; one elsewhere (or on loopback) through the agent's forwarder
// on the docker0 address, whose address replaces the supervisor's in env
// (with Config.ForwardTURN). The port computers use is opened to them in
// the host firewall. A failure leaves the computer without live view, not
// without a start.
func (l *Lender) liveViewEnv(ctx context.Context, r lending.CreateRequest, env map[string]string) map[string]string {
	if r.Image != providers.ImageDesktop || env[envTURNPort] == "" {
		return env
	}
	host := env[envTURNHost]
	port, err := strconv.Atoi(env[envTURNPort])
	if err != nil || port < 1 || port > 65535 || host == "" {
		l.log.Warn("desktop computer with a bad TURN_PUBLIC_HOST or TURN_PORT; no live view", "computer", r.ComputerID, "host", host, "port", env[envTURNPort])
		return env
	}
	if l.cfg.ForwardTURN && !reachableFromComputers(host) {
		f, err := l.forwardTURN(net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			l.log.Warn("could not forward TURN for a desktop computer; no live view", "computer", r.ComputerID, "err", err)
			return env
		}
		env[envTURNHost], env[envTURNPort] = f.host, strconv.Itoa(f.port)
		port = f.port
	}
	if l.cfg.OpenTURN != nil {
		if err := l.cfg.OpenTURN(ctx, port); err != nil {
			l.log.Warn("could not open the TURN port to computers in the host firewall; live view of this computer may fail", "computer", r.ComputerID, "port", port, "err", err)
		}
	}
	return env
}

// viewURL is the owner link of a desktop session at the paired
// supervisor, or empty while the agent has not seen the computer's token
// (the supervisor's first call, at start, brings it) or is not paired.
func (l *Lender) viewURL(c *computer) string {
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
