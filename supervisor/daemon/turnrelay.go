package daemon

import "strings"

// TURNRelay is the TURN relay's public address, host:port, as desktop
// computers are given it; empty when live view is off. A lending agent on
// this machine is told it explicitly (berth dev), since it never takes a
// relay address from a supervisor's request.
func (d *Daemon) TURNRelay() string {
	if len(d.viewerTURN) == 0 {
		return ""
	}
	hp, _, _ := strings.Cut(strings.TrimPrefix(d.viewerTURN[0], "turn:"), "?")
	return hp
}
