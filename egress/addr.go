package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// blockedV4 are the IPv4 ranges no computer may reach: this network,
// private, shared (CGNAT), loopback, link-local (cloud metadata), IETF
// protocol assignments, documentation, 6to4 relay anycast, benchmarking,
// multicast, reserved and broadcast.
var blockedV4 = mustPrefixes(
	"0.0.0.0/8",
	"10.0.0.0/8",
	"100.64.0.0/10",
	"127.0.0.0/8",
	"169.254.0.0/16",
	"172.16.0.0/12",
	"192.0.0.0/24",
	"192.0.2.0/24",
	"192.88.99.0/24",
	"192.168.0.0/16",
	"198.18.0.0/15",
	"198.51.100.0/24",
	"203.0.113.0/24",
	"224.0.0.0/4",
	"240.0.0.0/4", // includes 255.255.255.255
)

// blockedV6 are the IPv6 ranges no computer may reach. The first seven are
// unspecified, loopback, unique local, link-local, multicast, documentation
// and discard-only. The last three are older or local-use forms that can
// reach private networks: IPv4-compatible addresses (::a.b.c.d), deprecated
// site-local addresses and the local-use NAT64 prefix, which may embed any
// IPv4 address anywhere in its suffix.
var blockedV6 = mustPrefixes(
	"::/128",
	"::1/128",
	"fc00::/7",
	"fe80::/10",
	"ff00::/8",
	"2001:db8::/32",
	"100::/64",

	"::/96",
	"fec0::/10",
	"64:ff9b:1::/48",
)

// Prefixes of IPv6 addresses that carry an IPv4 address, which is checked
// as IPv4. IPv4-mapped addresses (::ffff:0:0/96) are unmapped first.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // IPv4 in the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // IPv4 in bits 16-48
	teredo = netip.MustParsePrefix("2001::/32")    // server in bits 32-64, client inverted in the last 32
)

func mustPrefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// blocklist decides which addresses are out of reach: the built-in ranges
// and the operator's extra ones.
type blocklist struct {
	extra4, extra6 []netip.Prefix
}

func newBlocklist(extra []netip.Prefix) blocklist {
	var b blocklist
	for _, p := range extra {
		p = normalizePrefix(p)
		if p.Addr().Is4() {
			b.extra4 = append(b.extra4, p)
		} else {
			b.extra6 = append(b.extra6, p)
		}
	}
	return b
}

// blocked reports whether a must not be dialled. An invalid address, or one
// with a zone, is blocked.
func (b blocklist) blocked(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return true
	}
	if a.Is4In6() {
		return b.blocked4(a.Unmap())
	}
	if a.Is4() {
		return b.blocked4(a)
	}
	if contains(blockedV6, a) || contains(b.extra6, a) {
		return true
	}
	for _, v4 := range embeddedV4(a) {
		if b.blocked4(v4) {
			return true
		}
	}
	return false
}

func (b blocklist) blocked4(a netip.Addr) bool {
	return contains(blockedV4, a) || contains(b.extra4, a)
}

func contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// embeddedV4 returns the IPv4 addresses that a carries in the NAT64, 6to4
// and Teredo forms, which translate or tunnel to IPv4.
func embeddedV4(a netip.Addr) []netip.Addr {
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}
	case sixTo4.Contains(a):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredo.Contains(a):
		server := netip.AddrFrom4([4]byte(b[4:8]))
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		return []netip.Addr{server, client}
	}
	return nil
}

// normalizePrefix masks p and turns an IPv4-mapped IPv6 range into the
// IPv4 range it covers, so that it applies to every form of the address.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// ParseBlockedCIDRs parses the value of EGRESS_BLOCKED_CIDRS: CIDR ranges
// or single addresses, separated by commas or white space. IPv4-mapped
// IPv6 ranges are turned into the IPv4 ranges they cover. An empty value
// gives no ranges.
func ParseBlockedCIDRs(s string) ([]netip.Prefix, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	var out []netip.Prefix
	for _, f := range fields {
		var p netip.Prefix
		if strings.Contains(f, "/") {
			var err error
			if p, err = netip.ParsePrefix(f); err != nil {
				return nil, fmt.Errorf("%w: %q is not a CIDR range such as 10.0.0.0/8 or fd00::/8", ErrBlockedCIDRs, f)
			}
		} else {
			a, err := netip.ParseAddr(f)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%w: %q is not a CIDR range such as 10.0.0.0/8 or fd00::/8", ErrBlockedCIDRs, f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, normalizePrefix(p))
	}
	return out, nil
}

// target is a host as a client named it, read into either an address or a
// DNS name.
type target struct {
	name string     // a DNS name to resolve, lower case, when addr is not set
	addr netip.Addr // the address a numeric host means
}

// parseHost reads a host from a request (without port, without brackets).
// Numeric forms are read the way inet_aton and browsers read them, so that
// 2130706433, 0x7f000001, 017700000001, 127.1 and 0177.0.0.1 all mean
// 127.0.0.1; a host whose last label is a number but that is not such a
// form is refused rather than resolved. Anything else must be a valid DNS
// name.
func parseHost(h string) (target, bool) {
	if h == "" || len(h) > 253+1 {
		return target{}, false
	}
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil || a.Zone() != "" {
			return target{}, false
		}
		return target{addr: a}, true
	}
	trimmed := strings.TrimSuffix(h, ".")
	if endsInNumber(trimmed) {
		a, ok := parseInetAton(trimmed)
		if !ok {
			return target{}, false
		}
		return target{addr: a}, true
	}
	name := strings.ToLower(trimmed)
	if !validName(name) {
		return target{}, false
	}
	return target{name: name}, true
}

// endsInNumber reports whether the last dot-separated label of h is a
// number (decimal, or hexadecimal with 0x), which makes h an IPv4 address
// to a browser or to inet_aton.
func endsInNumber(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X") {
		return strings.Trim(last[2:], "0123456789abcdefABCDEF") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// parseInetAton reads s as inet_aton does: one to four parts, each
// decimal, octal (leading 0) or hexadecimal (leading 0x); the last part
// fills the bytes that remain.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := parseAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	for _, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n = n<<8 | v
	}
	rest := uint(5-len(parts)) * 8 // bits the last part fills
	last := vals[len(vals)-1]
	if last >= 1<<rest {
		return netip.Addr{}, false
	}
	n = n<<rest | last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func parseAtonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	if strings.ContainsAny(p, "+-_") {
		return 0, false
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}

// validName reports whether s is a DNS host name: labels of letters,
// digits, hyphens and underscores, 1 to 63 bytes each.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// localName reports whether name always means this machine, whatever the
// resolver says: localhost, and the names container engines give the host
// and their own VM (Docker Desktop's host.docker.internal,
// gateway.docker.internal and the older docker.for.mac/win forms, Podman's
// host.containers.internal).
func localName(name string) bool {
	for _, zone := range []string{"localhost", "docker.internal", "containers.internal"} {
		if name == zone || strings.HasSuffix(name, "."+zone) {
			return true
		}
	}
	switch name {
	case "docker.for.mac.localhost", "docker.for.win.localhost", "docker.for.mac.host.internal", "docker.for.win.host.internal":
		return true
	}
	return false
}
