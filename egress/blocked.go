package egress

import "net/netip"

// Blocked reports whether the proxy refuses a destination at a: the
// private, loopback, link-local, multicast and reserved ranges it always
// blocks, and extra. Other Berth parts that connect on a computer's
// behalf (the lending agent's TURN forwarder) hold their destinations to
// the same rule.
func Blocked(a netip.Addr, extra []netip.Prefix) bool {
	return newBlocklist(extra).blocked(a)
}
