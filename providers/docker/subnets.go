package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/providers"
)

// Computer networks take their subnets from a range Berth manages
// (COMPUTER_SUBNETS), never from the engine's default address pools: a
// default engine has room for about 30 networks there, and every computer
// has one. Each network gets a /28 (SubnetBits) of the range: the computer,
// its gateway (the host) and the containers DOCKER_JOIN_CONTAINERS names.
//
// The engine is the arbiter between processes: it refuses a network whose
// subnet overlaps one it already has ("Pool overlaps"), so supervisors,
// lenders and tunnel runners sharing one engine never collide. Each process
// keeps its own view of what is taken (read from the engine, then kept as it
// creates and removes networks) so that it rarely asks for a taken subnet,
// starts its search at a random place in the range, and moves on when the
// engine refuses one.

// SubnetBits is the prefix length of each computer network's subnet.
const SubnetBits = 28

// DefaultSubnetCandidates are the ranges COMPUTER_SUBNETS defaults to: the
// first that overlaps no route of the host and no network on the engine
// other than Berth's own.
var DefaultSubnetCandidates = func() []netip.Prefix {
	var out []netip.Prefix
	for b := 213; b <= 228; b++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b), 0, 0}), 16))
	}
	return out
}()

// subnetPool hands out the subnets of one range on one engine. One pool
// serves every provider of a process on that engine.
type subnetPool struct {
	mu      sync.Mutex
	rng     netip.Prefix
	blocks  int
	taken   map[int]bool // on the engine, as last seen or made by us
	pending map[int]bool // handed out, network not yet made
	next    int
}

var (
	subnetPoolsMu sync.Mutex
	subnetPools   = map[string]*subnetPool{} // engine host and setting -> pool
)

// subnetPoolKey names the provider's engine and range in subnetPools.
func (d *Docker) subnetPoolKey() string { return d.opts.Host + "|" + d.opts.Subnets.String() }

// subnets returns the provider's subnet pool, reading the range and the
// engine's networks on first use. An error (a range that overlaps a route
// of the host, an engine that cannot be reached) is returned again on the
// next call, which tries again.
func (d *Docker) subnets(ctx context.Context) (*subnetPool, error) {
	key := d.subnetPoolKey()
	subnetPoolsMu.Lock()
	defer subnetPoolsMu.Unlock()
	if p := subnetPools[key]; p != nil {
		return p, nil
	}
	nets, err := d.cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", d.engineErr(err))
	}
	routes, err := d.opts.Routes()
	if err != nil {
		return nil, fmt.Errorf("%s: read the host's routes: %w", SettingSubnets, err)
	}
	rng, err := chooseRange(d.opts.Subnets, routes, foreignSubnets(nets.Items))
	if err != nil {
		return nil, err
	}
	p := newSubnetPool(rng)
	p.see(nets.Items)
	d.log.Info("computer networks", "range", rng, "subnet", fmt.Sprintf("/%d", SubnetBits), "taken", len(p.taken))
	subnetPools[key] = p
	return p, nil
}

func newSubnetPool(rng netip.Prefix) *subnetPool {
	blocks := 1 << (SubnetBits - rng.Bits())
	return &subnetPool{
		rng:     rng,
		blocks:  blocks,
		taken:   map[int]bool{},
		pending: map[int]bool{},
		next:    rand.IntN(blocks),
	}
}

// chooseRange checks the configured range, or picks the default one.
func chooseRange(configured netip.Prefix, routes []Route, foreign []netip.Prefix) (netip.Prefix, error) {
	if configured.IsValid() {
		for _, r := range routes {
			if r.Prefix.Overlaps(configured) {
				return netip.Prefix{}, fmt.Errorf("%s=%s overlaps the host's route to %s (%s): computers would shadow those addresses; pick a range no route of this machine uses",
					SettingSubnets, configured, r.Prefix, r.Interface)
			}
		}
		return configured, nil
	}
next:
	for _, c := range DefaultSubnetCandidates {
		for _, r := range routes {
			if r.Prefix.Overlaps(c) {
				continue next
			}
		}
		for _, f := range foreign {
			if f.Overlaps(c) {
				continue next
			}
		}
		return c, nil
	}
	return netip.Prefix{}, fmt.Errorf("%s: every default range (%s to %s) overlaps a route of the host or a Docker network; set %s to a free /16 (at least /%d)",
		SettingSubnets, DefaultSubnetCandidates[0], DefaultSubnetCandidates[len(DefaultSubnetCandidates)-1], SettingSubnets, SubnetBits-4)
}

// foreignSubnets are the IPv4 subnets of the engine's networks that are not
// Berth's computer networks.
func foreignSubnets(nets []network.Summary) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range nets {
		if isBerthNetwork(n.Labels) {
			continue
		}
		for _, c := range n.IPAM.Config {
			if c.Subnet.IsValid() && c.Subnet.Addr().Is4() {
				out = append(out, c.Subnet.Masked())
			}
		}
	}
	return out
}

func isBerthNetwork(labels map[string]string) bool {
	return labels[providers.LabelManaged] == "true" || labels[labelHolder] == "true"
}

// see marks the blocks the engine's networks use as taken.
func (p *subnetPool) see(nets []network.Summary) {
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			p.markLocked(c.Subnet, true)
		}
	}
}

// markLocked marks every block that s overlaps as taken or free.
func (p *subnetPool) markLocked(s netip.Prefix, taken bool) {
	if !s.IsValid() || !s.Addr().Is4() || !s.Overlaps(p.rng) {
		return
	}
	s = s.Masked()
	if s.Bits() <= p.rng.Bits() { // covers the whole range
		for i := range p.blocks {
			p.setLocked(i, taken)
		}
		return
	}
	first := p.index(s.Addr())
	n := 1
	if s.Bits() < SubnetBits {
		n = 1 << (SubnetBits - s.Bits())
	}
	for i := first; i < first+n && i < p.blocks; i++ {
		p.setLocked(i, taken)
	}
}

func (p *subnetPool) setLocked(i int, taken bool) {
	if taken {
		p.taken[i] = true
	} else {
		delete(p.taken, i)
	}
}

func (p *subnetPool) index(a netip.Addr) int {
	b, r := a.As4(), p.rng.Addr().As4()
	return int(binary.BigEndian.Uint32(b[:])-binary.BigEndian.Uint32(r[:])) >> (32 - SubnetBits)
}

func (p *subnetPool) block(i int) netip.Prefix {
	r := p.rng.Addr().As4()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(r[:])+uint32(i)<<(32-SubnetBits))
	return netip.PrefixFrom(netip.AddrFrom4(b), SubnetBits)
}

// take hands out a subnet no network of this process or the engine (as
// last seen) uses, or false when the range is full.
func (p *subnetPool) take() (netip.Prefix, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.blocks {
		i := p.next
		p.next = (p.next + 1) % p.blocks
		if p.taken[i] || p.pending[i] {
			continue
		}
		p.pending[i] = true
		return p.block(i), true
	}
	return netip.Prefix{}, false
}

// made records the outcome of creating a network on s: made, or refused
// because another process holds it (taken), or failed for another reason.
func (p *subnetPool) made(s netip.Prefix, taken bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, p.index(s.Addr()))
	if taken {
		p.markLocked(s, true)
	}
}

// release frees a subnet whose network was removed.
func (p *subnetPool) release(s netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.markLocked(s, false)
}

// resync replaces the view of what is taken with the engine's.
func (p *subnetPool) resync(nets []network.Summary) {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.taken)
	p.see(nets)
}

// free is how many subnets are neither taken nor pending.
func (p *subnetPool) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocks - len(p.taken) - len(p.pending)
}

// maxSubnetTries bounds the subnets one network create asks the engine for
// before it reads the engine's networks again.
const maxSubnetTries = 16

// createComputerNetwork creates an internal bridge network on a subnet of
// the range, trying other subnets while the engine says one is taken.
func (d *Docker) createComputerNetwork(ctx context.Context, name, bridge string, labels map[string]string) (string, error) {
	p, err := d.subnets(ctx)
	if err != nil {
		return "", fmt.Errorf("create network %s: %w", name, err)
	}
	for round := 0; round < 2; round++ {
		for range maxSubnetTries {
			s, ok := p.take()
			if !ok {
				break
			}
			res, err := d.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
				Driver:   "bridge",
				Internal: true,
				Labels:   labels,
				IPAM:     &network.IPAM{Config: []network.IPAMConfig{{Subnet: s}}},
				Options:  map[string]string{bridgeNameOption: bridge},
			})
			if err == nil {
				p.made(s, true)
				return res.ID, nil
			}
			overlap := strings.Contains(err.Error(), "overlap")
			p.made(s, overlap)
			if !overlap {
				return "", fmt.Errorf("create network %s on %s: %w", name, s, d.engineErr(err))
			}
		}
		// Many refusals, or no free subnet in our view: read the engine.
		nets, err := d.cli.NetworkList(ctx, client.NetworkListOptions{})
		if err != nil {
			return "", fmt.Errorf("create network %s: list networks: %w", name, d.engineErr(err))
		}
		p.resync(nets.Items)
	}
	return "", fmt.Errorf("create network %s: %w: %s=%s has no free /%d subnet (%d in use); widen it",
		name, providers.ErrCapacity, SettingSubnets, p.rng, SubnetBits, p.blocks-p.free())
}

// releaseSubnets frees the range's subnets of a removed network.
func (d *Docker) releaseSubnets(cfg []network.IPAMConfig) {
	subnetPoolsMu.Lock()
	p := subnetPools[d.subnetPoolKey()]
	subnetPoolsMu.Unlock()
	if p == nil {
		return
	}
	for _, c := range cfg {
		p.release(c.Subnet)
	}
}

// Route is one IPv4 route of the host.
type Route struct {
	Prefix    netip.Prefix
	Interface string
}

// berthBridge matches the host interfaces of computer networks
// (bridgeName), whose routes are Berth's own.
var berthBridge = regexp.MustCompile(`^` + BridgePrefix + `[0-9a-f]{10}$`)

// HostRoutes reads the host's IPv4 routes from /proc/net/route, leaving out
// default routes and those of Berth's computer networks. Where there is no
// such file (macOS, Windows: the engine runs in a VM of its own) it returns
// none.
func HostRoutes() ([]Route, error) {
	raw, err := os.ReadFile("/proc/net/route")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseRoutes(raw)
}

// parseRoutes reads /proc/net/route's text: interface, destination and mask
// in little-endian hex.
func parseRoutes(raw []byte) ([]Route, error) {
	var out []Route
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for line := 0; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if line == 0 || len(f) < 8 {
			continue
		}
		dst, err1 := hex.DecodeString(f[1])
		mask, err2 := hex.DecodeString(f[7])
		if err1 != nil || err2 != nil || len(dst) != 4 || len(mask) != 4 {
			return nil, fmt.Errorf("/proc/net/route line %d: %q", line+1, sc.Text())
		}
		bits := 0
		for _, b := range mask {
			for ; b != 0; b <<= 1 {
				bits++
			}
		}
		if bits == 0 || berthBridge.MatchString(f[0]) {
			continue // the default route, or a computer network
		}
		// The kernel writes the address in host order (little-endian here).
		a := netip.AddrFrom4([4]byte{dst[3], dst[2], dst[1], dst[0]})
		out = append(out, Route{Prefix: netip.PrefixFrom(a, bits).Masked(), Interface: f[0]})
	}
	return out, sc.Err()
}
