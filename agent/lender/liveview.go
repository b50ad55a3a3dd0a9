package lender

import (
	"context"
	"net/url"
	"strconv"
	"strings"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/providers"
)

// Live view of a lent desktop computer. The supervisor signals to the
// computer's computerd through the relay link, like every other call, and
// gives the computer TURN_PUBLIC_HOST and TURN_PORT, its TURN relay; the
// agent opens that port to its computers in the host firewall. The owner
// watches through the supervisor's viewer page too: each desktop session
// of the control API carries an owner link, which the agent derives from
// the computer's token as it passes through (control.OwnerViewKey).

// envTURNPort is the variable the supervisor names its TURN relay's port in.
const envTURNPort = "TURN_PORT"

// openTURN opens the TURN port a desktop computer is given to computers in
// the host firewall. A failure leaves the computer without live view, not
// without a start.
func (l *Lender) openTURN(ctx context.Context, r CreateRequest) {
	if l.cfg.OpenTURN == nil || r.Image != providers.ImageDesktop || r.Env[envTURNPort] == "" {
		return
	}
	port, err := strconv.Atoi(r.Env[envTURNPort])
	if err != nil || port < 1 || port > 65535 {
		l.log.Warn("desktop computer with a bad TURN_PORT; no live view", "computer", r.ComputerID, "port", r.Env[envTURNPort])
		return
	}
	if err := l.cfg.OpenTURN(ctx, port); err != nil {
		l.log.Warn("could not open the TURN port to computers in the host firewall; live view of this computer may fail", "computer", r.ComputerID, "port", port, "err", err)
	}
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
	return base + "/view/" + url.PathEscape(c.s.SessionID) + "/owner?key=" + control.OwnerViewKey(tok, c.s.SessionID)
}
