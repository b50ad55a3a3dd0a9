// Package hostnet answers questions about this host's network that the
// supervisor and the docker provider both ask.
package hostnet

import (
	"fmt"
	"net"
	"net/netip"
)

// BridgeIPv4 returns the IPv4 address of the host's docker0 bridge: where
// computers reach a service on the host (the egress proxy, TURN), and
// what the host firewall's openings are for.
func BridgeIPv4() (netip.Addr, error) {
	const name = "docker0"
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no IPv4 address", name)
}
