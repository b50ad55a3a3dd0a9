package docker

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// Under the lending agent's engine guard (Docker Desktop on macOS and
// Windows, where no host firewall can be set) a computer's internal network
// is its whole world: the egress proxy runs as a container (Options.
// EgressContainer) that joins each computer's network at a fixed address,
// the network's last host address, and the computer finds it by name
// (EgressHost, an /etc/hosts entry). The address is the same whenever the
// proxy container joins a network again (after the agent restarts), so a
// computer's proxy settings stay right for its whole life.

// EgressHost is the name computers reach the egress proxy container by
// when Options.EgressContainer is set.
const EgressHost = "berth-egress"

// EgressAddr is the egress proxy container's address on a computer network
// of subnet p: its last host address (the one before broadcast). It
// returns the zero Addr for a subnet that is not IPv4 or has fewer than
// two host addresses.
func EgressAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	if !p.Addr().Is4() || p.Bits() > 29 {
		return netip.Addr{}
	}
	b := p.Addr().As4()
	n := binary.BigEndian.Uint32(b[:]) | (1<<(32-p.Bits()) - 1) // broadcast
	binary.BigEndian.PutUint32(b[:], n-1)
	return netip.AddrFrom4(b)
}

// ConnectEgress connects the egress proxy container (Options.
// EgressContainer) to a computer network (name or id) at the network's
// EgressAddr and returns that address. A container already connected
// there is not an error. When the container does not exist it returns the
// address all the same, with ErrNoEgressContainer: the proxy takes that
// address when it joins later (ConnectEgressAll).
func (d *Docker) ConnectEgress(ctx context.Context, netRef string) (netip.Addr, error) {
	c := d.opts.EgressContainer
	if c == "" {
		return netip.Addr{}, fmt.Errorf("connect the egress proxy to network %s: no egress container set", netRef)
	}
	res, err := d.cli.NetworkInspect(ctx, netRef, client.NetworkInspectOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("inspect network %s: %w", netRef, d.engineErr(err))
	}
	var addr netip.Addr
	for _, cfg := range res.Network.IPAM.Config {
		if a := EgressAddr(cfg.Subnet); a.IsValid() {
			addr = a
			break
		}
	}
	if !addr.IsValid() {
		return netip.Addr{}, fmt.Errorf("network %s has no IPv4 subnet with room for the egress proxy", netRef)
	}
	_, err = d.cli.NetworkConnect(ctx, res.Network.ID, client.NetworkConnectOptions{
		Container:      c,
		EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr}},
	})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		if cerrdefs.IsNotFound(err) && strings.Contains(err.Error(), c) {
			return addr, fmt.Errorf("connect the egress proxy %s to network %s: %w", c, netRef, ErrNoEgressContainer)
		}
		return netip.Addr{}, fmt.Errorf("connect the egress proxy %s to network %s at %s: %w", c, netRef, addr, d.engineErr(err))
	}
	return addr, nil
}

// ConnectEgressAll connects the egress proxy container to every computer
// network carrying label (key=value): those of the computers an agent
// adopts after a restart. It returns the number of networks joined.
func (d *Docker) ConnectEgressAll(ctx context.Context, label string) (int, error) {
	f := labelFilter("", "").Add("label", label)
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return 0, fmt.Errorf("list networks: %w", d.engineErr(err))
	}
	n := 0
	for _, nw := range res.Items {
		if !nw.Internal {
			continue
		}
		if _, err := d.ConnectEgress(ctx, nw.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
