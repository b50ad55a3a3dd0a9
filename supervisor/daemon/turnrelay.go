package daemon

// TURNRelay is the TURN relay's public address, host:port, as desktop
// computers are given it; empty when live view is off. A lending agent on
// this machine is told it explicitly (berth dev), since it never takes a
// relay address from a supervisor's request.
func (d *Daemon) TURNRelay() string { return d.turnRelay }
