// Package hostnet answers questions about this host's network, and opens
// its listeners, for the supervisor, the docker provider and the agents.
package hostnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
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

// ListenUDPTCP listens on UDP and TCP (IPv4) at the same host and port, as
// a TURN relay or its forwarder does; port "0" picks one free for both,
// trying ten times.
func ListenUDPTCP(host, port string) (net.PacketConn, net.Listener, error) {
	for range 10 {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(host, port))
		if err != nil {
			return nil, nil, err
		}
		p := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
		ln, err := net.Listen("tcp4", net.JoinHostPort(host, p))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" {
			return nil, nil, err
		}
	}
	return nil, nil, errors.New("no port free for both UDP and TCP")
}
