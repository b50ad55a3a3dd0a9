package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The ranges issue 4 lists, written out again here so that a change to the
// table in addr.go cannot silently drop one.
var issueRanges = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24",
	"192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
	"224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "2001:db8::/32", "100::/64",
}

func TestEveryRangeBlockedAtBothEnds(t *testing.T) {
	var b blocklist
	for _, s := range issueRanges {
		p := netip.MustParsePrefix(s)
		first, last := p.Addr(), lastAddr(p)
		for _, a := range []netip.Addr{first, last, first.Next()} {
			if !p.Contains(a) {
				continue
			}
			if !b.blocked(a) {
				t.Errorf("%s (in %s) not blocked", a, s)
			}
			if a.Is4() {
				if m := netip.AddrFrom16(a.As16()); !b.blocked(m) {
					t.Errorf("%s (mapped %s) not blocked", m, s)
				}
			}
		}
	}
}

// Addresses right outside each IPv4 range, where not inside another one,
// are allowed: the ranges are no wider than listed.
func TestRangesNoWider(t *testing.T) {
	var b blocklist
	inAny := func(a netip.Addr) bool {
		for _, s := range issueRanges {
			if netip.MustParsePrefix(s).Contains(a) {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, s := range issueRanges {
		p := netip.MustParsePrefix(s)
		if !p.Addr().Is4() {
			continue
		}
		for _, a := range []netip.Addr{p.Addr().Prev(), lastAddr(p).Next()} {
			if !a.IsValid() || inAny(a) {
				continue
			}
			checked++
			if b.blocked(a) {
				t.Errorf("%s, just outside %s, is blocked", a, s)
			}
		}
	}
	if checked < 15 {
		t.Fatalf("checked only %d neighbours", checked)
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestBlockedAddresses(t *testing.T) {
	extra, err := ParseBlockedCIDRs("151.101.0.0/16, 2a04:4e42::/32")
	if err != nil {
		t.Fatal(err)
	}
	b := newBlocklist(extra)
	blocked := []string{
		// IPv4
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254",
		"127.0.0.1", "127.255.255.255", "169.254.169.254", "172.16.0.1", "172.31.255.255",
		"192.0.0.8", "192.0.2.1", "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.255",
		"198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.250", "240.0.0.1",
		"255.255.255.255",
		// IPv6
		"::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "febf::1", "ff02::1", "ff05::1:3",
		"2001:db8::1", "2001:db8:ffff::1", "100::1", "100::ffff:ffff:ffff:ffff",
		// IPv4-mapped
		"::ffff:127.0.0.1", "::ffff:10.1.2.3", "::ffff:169.254.169.254", "::ffff:0.0.0.0",
		"::ffff:100.64.0.1",
		// NAT64
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::c0a8:101", "64:ff9b::a00:1",
		// 6to4: IPv4 in bits 16-48
		"2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101:1::1", "2002:a00:1::",
		// Teredo: client (inverted last 32 bits) 127.0.0.1, public server
		"2001:0:5ef5:79fd:0:0:80ff:fffe",
		// Teredo: client 169.254.169.254
		"2001:0:5ef5:79fd:0:0:5601:5601",
		// Teredo: private server 10.0.0.1, public client 8.8.8.8
		"2001:0:a00:1:0:0:f7f7:f7f7",
		// beyond the issue's list: IPv4-compatible, site-local, local-use NAT64
		"::7f00:1", "::808:808", "fec0::1", "64:ff9b:1::808:808",
		// EGRESS_BLOCKED_CIDRS, in every form
		"151.101.1.69", "::ffff:151.101.1.69", "64:ff9b::9765:145", "2002:9765:145::1",
		"2a04:4e42::1",
	}
	for _, s := range blocked {
		a := netip.MustParseAddr(s)
		if !b.blocked(a) {
			t.Errorf("%s allowed, want blocked", s)
		}
	}
	allowed := []string{
		"93.184.215.14", "8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0",
		"172.15.255.255", "172.32.0.0", "192.0.1.255", "192.169.0.0", "198.17.255.255",
		"198.20.0.0", "223.255.255.255", "11.0.0.0", "126.255.255.255", "128.0.0.0",
		"2606:4700::1111", "2001:4860:4860::8888", "2001:db9::1", "::ffff:8.8.8.8",
		"64:ff9b::808:808", "2002:808:808::1", "2001:0:5ef5:79fd:0:0:f7f7:f7f7",
		"101::1", "100:0:0:1::1",
	}
	for _, s := range allowed {
		a := netip.MustParseAddr(s)
		if b.blocked(a) {
			t.Errorf("%s blocked, want allowed", s)
		}
	}
	if !b.blocked(netip.Addr{}) {
		t.Error("the zero address is allowed")
	}
	if !b.blocked(netip.MustParseAddr("2606:4700::1111%eth0")) {
		t.Error("an address with a zone is allowed")
	}
}

func TestParseHost(t *testing.T) {
	addrs := map[string]string{
		"2130706433":          "127.0.0.1",
		"0x7f000001":          "127.0.0.1",
		"0X7F000001":          "127.0.0.1",
		"017700000001":        "127.0.0.1",
		"127.1":               "127.0.0.1",
		"127.0.1":             "127.0.0.1",
		"0177.0.0.1":          "127.0.0.1",
		"0x7f.1":              "127.0.0.1",
		"0x7f.0.0.0x1":        "127.0.0.1",
		"127.000.000.001":     "127.0.0.1",
		"127.0.0.1.":          "127.0.0.1",
		"0":                   "0.0.0.0",
		"0x":                  "0.0.0.0",
		"3232235777":          "192.168.1.1",
		"0xa9fea9fe":          "169.254.169.254",
		"169.254.43518":       "169.254.169.254",
		"0251.0376.0251.0376": "169.254.169.254",
		"10.0x10203":          "10.1.2.3",
		"93.184.215.14":       "93.184.215.14",
		"::ffff:127.0.0.1":    "::ffff:127.0.0.1",
		"::1":                 "::1",
		"2606:4700::1111":     "2606:4700::1111",
	}
	for in, want := range addrs {
		got, ok := parseHost(in)
		if !ok || got.addr != netip.MustParseAddr(want) || got.name != "" {
			t.Errorf("parseHost(%q) = %+v, %v; want address %s", in, got, ok, want)
		}
	}
	names := map[string]string{
		"example.com":       "example.com",
		"Example.COM":       "example.com",
		"example.com.":      "example.com",
		"a_b-c.example.com": "a_b-c.example.com",
		"1.2.3.4.nip.io":    "1.2.3.4.nip.io",
		"0x7f000001.com":    "0x7f000001.com",
		"localhost":         "localhost",
	}
	for in, want := range names {
		got, ok := parseHost(in)
		if !ok || got.name != want || got.addr.IsValid() {
			t.Errorf("parseHost(%q) = %+v, %v; want name %s", in, got, ok, want)
		}
	}
	invalid := []string{
		"", "1.2.3.4.5", "256.0.0.1", "1.256.0.0", "127.0.0.256.", "4294967296",
		"0x100000000", "08.0.0.1", "0x7g.1", "1..1", ".1", "127.16777216",
		"example.123", "foo.0x10", "exa mple.com", "exa/mple.com", "é.example.com",
		"fe80::1%eth0", "::ffff:127.1", "[::1]", "a..b", strings.Repeat("a", 64) + ".com",
		"+1", "1.+2",
	}
	for _, in := range invalid {
		if got, ok := parseHost(in); ok {
			t.Errorf("parseHost(%q) = %+v, want invalid", in, got)
		}
	}
}

func TestParseBlockedCIDRs(t *testing.T) {
	got, err := ParseBlockedCIDRs(" 10.0.0.0/8,2001:db8::/32  203.0.113.7\n::ffff:93.184.0.0/112, fd00::1, 192.168.1.77/16 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("203.0.113.7/32"),
		netip.MustParsePrefix("93.184.0.0/16"),
		netip.MustParsePrefix("fd00::1/128"),
		netip.MustParsePrefix("192.168.0.0/16"),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := ParseBlockedCIDRs("  "); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "bogus", "10.0.0.0/8,,nope", "fe80::1%eth0", "10.0.0/8"} {
		_, err := ParseBlockedCIDRs(bad)
		if !errors.Is(err, ErrBlockedCIDRs) || !strings.Contains(err.Error(), "EGRESS_BLOCKED_CIDRS") {
			t.Errorf("ParseBlockedCIDRs(%q) = %v, want an error naming EGRESS_BLOCKED_CIDRS", bad, err)
		}
	}
}

func TestEmbeddedV4(t *testing.T) {
	cases := map[string][]string{
		"64:ff9b::c000:221":                    {"192.0.2.33"},
		"2002:c000:221::1":                     {"192.0.2.33"},
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": {"65.54.227.120", "192.0.2.45"},
		"2606:4700::1111":                      nil,
	}
	for in, want := range cases {
		var got []string
		for _, a := range embeddedV4(netip.MustParseAddr(in)) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("embeddedV4(%s) = %v, want %v", in, got, want)
		}
	}
}

// Every inet_aton spelling of an address means that address: one to four
// parts, each in decimal, octal or hexadecimal.
func TestInetAtonSpellings(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "169.254.169.254", "10.1.2.3", "192.168.0.1", "0.0.0.0", "255.255.255.255", "93.184.215.14"} {
		a := netip.MustParseAddr(s)
		b := a.As4()
		n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		var forms []string
		for _, f := range []string{"%d", "0%o", "0x%x", "0X%X"} {
			forms = append(forms,
				fmt.Sprintf(f, n),
				fmt.Sprintf(f+"."+f, b[0], n&0xffffff),
				fmt.Sprintf(f+"."+f+"."+f, b[0], b[1], n&0xffff),
				fmt.Sprintf(f+"."+f+"."+f+"."+f, b[0], b[1], b[2], b[3]),
				fmt.Sprintf("%d.0x%x.0%o.%d", b[0], b[1], b[2], b[3]),
			)
		}
		for _, f := range forms {
			got, ok := parseHost(f)
			if !ok || got.addr != a {
				t.Errorf("%s: parseHost(%q) = %+v, %v", s, f, got, ok)
			}
		}
	}
}

// FuzzParseHost checks that nothing numeric is ever handed on as a name,
// and that every name handed on is a valid DNS name.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"2130706433", "0x7f000001", "127.1", "example.com", "::ffff:127.0.0.1", "1.2.3.4.5", "a.0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseHost(s)
		if !ok {
			return
		}
		if got.addr.IsValid() == (got.name != "") {
			t.Fatalf("parseHost(%q) = %+v", s, got)
		}
		if got.name != "" && (endsInNumber(got.name) || !validName(got.name)) {
			t.Fatalf("parseHost(%q) hands on name %q", s, got.name)
		}
	})
}
