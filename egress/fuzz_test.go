package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Fuzz targets for what a computer sends the egress proxy: the target of a
// CONNECT or of an absolute-form request, its Proxy-Authorization, and the
// address forms a host may take. `make fuzz` runs each for a short while;
// plain `go test` runs their seeds.

// publicOracle reports whether a is an address a computer may reach,
// decided apart from the blocklist: by the standard library's classes and
// the built-in ranges, for a and for every IPv4 address it carries.
func publicOracle(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return false
	}
	if a.Is4() {
		return !contains(blockedV4, a)
	}
	if contains(blockedV6, a) {
		return false
	}
	for _, v4 := range embeddedV4(a) {
		if !publicOracle(v4) {
			return false
		}
	}
	return true
}

// FuzzBlockedForms checks that every spelling of an IPv4 address (plain,
// IPv4-mapped, NAT64, 6to4, Teredo, IPv4-compatible) is blocked exactly
// when the address is, and that an IPv6 address is blocked exactly when
// the independent oracle says it is not public.
func FuzzBlockedForms(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "8.8.8.8", "93.184.215.14",
		"255.255.255.255", "0.0.0.0", "100.64.0.1", "::1", "fe80::1", "2606:4700::1111", "2001:db8::1",
		"64:ff9b::7f00:1", "2002:a9fe:a9fe::1", "2001:0:5ef5:79fd:0:0:80ff:fffe", "fec0::1", "::ffff:0:0"} {
		a := netip.MustParseAddr(s).As16()
		f.Add(a[:], uint16(0x1234))
	}
	var b blocklist
	f.Fuzz(func(t *testing.T, raw []byte, suffix uint16) {
		var a16 [16]byte
		copy(a16[:], raw)
		a6 := netip.AddrFrom16(a16)
		if a6.Is4In6() {
			a6 = a6.Unmap()
		}
		if got, want := b.blocked(a6), !publicOracle(a6); got != want {
			t.Fatalf("blocked(%s) = %v, oracle says %v", a6, got, want)
		}

		v4 := netip.AddrFrom4([4]byte(a16[:4]))
		want := b.blocked(v4)
		if want != !publicOracle(v4) {
			t.Fatalf("blocked(%s) = %v, oracle disagrees", v4, want)
		}
		c := v4.As4()
		s := byte(suffix >> 8)
		forms := []netip.Addr{
			netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: c[0], 13: c[1], 14: c[2], 15: c[3]}),                                   // mapped
			netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: c[0], 13: c[1], 14: c[2], 15: c[3]}),                   // NAT64
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: c[0], 3: c[1], 4: c[2], 5: c[3], 15: s}),                                  // 6to4
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: 8, 5: 8, 6: 8, 7: 8, 12: ^c[0], 13: ^c[1], 14: ^c[2], 15: ^c[3]}),         // Teredo client
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: c[0], 5: c[1], 6: c[2], 7: c[3], 12: 0xf7, 13: 0xf7, 14: 0xf7, 15: 0xf7}), // Teredo server
		}
		for _, form := range forms {
			if got := b.blocked(form); got != want {
				t.Fatalf("blocked(%s) = %v, but blocked(%s) = %v", form, got, v4, want)
			}
		}
		// IPv4-compatible addresses are refused whatever they carry.
		if compat := netip.AddrFrom16([16]byte{12: c[0], 13: c[1], 14: c[2], 15: c[3]}); !b.blocked(compat) {
			t.Fatalf("IPv4-compatible %s allowed", compat)
		}
	})
}

// FuzzHostAddress checks the numeric host forms end to end: a host read as
// an address is blocked exactly when the oracle says it is not public, and
// a host read as a name never parses as an address in any other reader.
func FuzzHostAddress(f *testing.F) {
	for _, s := range []string{"2130706433", "0x7f000001", "017700000001", "127.1", "0177.0.0.1", "0x7f.1",
		"169.254.43518", "8.8.8.8", "8.8.8.8.", "::ffff:127.0.0.1", "::ffff:8.8.8.8", "64:ff9b::a9fe:a9fe",
		"example.com", "localhost", "1.2.3.4.nip.io", "0x", "0", "09", "1e1", "1.1e1", "[::1]", "fe80::1%25eth0"} {
		f.Add(s)
	}
	var b blocklist
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseHost(s)
		if !ok {
			return
		}
		if got.addr.IsValid() {
			if got.name != "" {
				t.Fatalf("parseHost(%q) = both %+v", s, got)
			}
			if b.blocked(got.addr) != !publicOracle(got.addr) {
				t.Fatalf("parseHost(%q) = %s: blocked %v, oracle disagrees", s, got.addr, b.blocked(got.addr))
			}
			return
		}
		// A name is what the resolver gets: it must not be something that
		// a resolver library or a browser would read as an address.
		if _, err := netip.ParseAddr(got.name); err == nil {
			t.Fatalf("parseHost(%q) hands on address %q as a name", s, got.name)
		}
		if net.ParseIP(got.name) != nil {
			t.Fatalf("parseHost(%q) hands on address %q as a name", s, got.name)
		}
		if got.name != strings.ToLower(got.name) || strings.HasSuffix(got.name, ".") || !validName(got.name) {
			t.Fatalf("parseHost(%q) hands on name %q", s, got.name)
		}
		// Reading the name again gives the same name.
		again, ok := parseHost(got.name)
		if !ok || again != got {
			t.Fatalf("parseHost(%q) = %+v, but parseHost(%q) = %+v, %v", s, got, got.name, again, ok)
		}
	})
}

// FuzzParseBlockedCIDRs checks that EGRESS_BLOCKED_CIDRS parses to masked,
// normalised ranges that print and parse back to themselves, and that each
// range given blocks its own addresses in every form.
func FuzzParseBlockedCIDRs(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", " 10.0.0.0/8,2001:db8::/32  203.0.113.7\n::ffff:93.184.0.0/112, fd00::1, 192.168.1.77/16 ",
		"::ffff:0:0/95", "::ffff:1.2.3.4/128", "0.0.0.0/0", "::/0", "fe80::1%eth0", "1.2.3.4/33", ",,", "\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseBlockedCIDRs(s)
		if err != nil {
			return
		}
		strs := make([]string, len(ps))
		for i, p := range ps {
			if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" {
				t.Fatalf("ParseBlockedCIDRs(%q): range %v is not a masked valid prefix", s, p)
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				t.Fatalf("ParseBlockedCIDRs(%q): IPv4-mapped range %v not turned into IPv4", s, p)
			}
			strs[i] = p.String()
		}
		again, err := ParseBlockedCIDRs(strings.Join(strs, ","))
		if err != nil || !slices.Equal(again, ps) {
			t.Fatalf("ParseBlockedCIDRs(%q) = %v; printed and parsed again: %v, %v", s, ps, again, err)
		}
		b := newBlocklist(ps)
		for _, p := range ps {
			if !b.blocked(p.Addr()) {
				t.Fatalf("ParseBlockedCIDRs(%q): %s of its own range %v is allowed", s, p.Addr(), p)
			}
			if p.Addr().Is4() {
				if m := netip.AddrFrom16(p.Addr().As16()); !b.blocked(m) {
					t.Fatalf("ParseBlockedCIDRs(%q): mapped %s of range %v is allowed", s, m, p)
				}
			}
		}
	})
}

// FuzzProxyAuth checks the Basic credentials reader: what it accepts is
// a Basic value whose decoding is exactly user:pass, and credentials
// written by a client always read back.
func FuzzProxyAuth(f *testing.F) {
	f.Add("Basic " + base64.StdEncoding.EncodeToString([]byte("c-7f3a:secret")))
	f.Add("basic  Yzpk ")
	f.Add("Bearer abc")
	f.Add("Basic")
	f.Add("Basic Og==")
	f.Add("Basic !!!")
	f.Fuzz(func(t *testing.T, h string) {
		user, pass, ok := proxyAuth(h)
		if ok {
			scheme, cred, _ := strings.Cut(strings.TrimSpace(h), " ")
			if !strings.EqualFold(scheme, "Basic") {
				t.Fatalf("proxyAuth(%q) accepted scheme %q", h, scheme)
			}
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
			if err != nil || string(raw) != user+":"+pass || strings.Contains(user, ":") {
				t.Fatalf("proxyAuth(%q) = %q, %q; decoded %q, %v", h, user, pass, raw, err)
			}
		} else if pass != "" {
			// A value without a colon gives its whole decoding as the user
			// and no password, which no computer's credentials match.
			t.Fatalf("proxyAuth(%q) refused but returned a password %q", h, pass)
		}
		// Round trip: a client's header for (h as user without colons, h as
		// password) reads back.
		u := strings.ReplaceAll(h, ":", "")
		gu, gp, ok := proxyAuth(basic(u, h))
		if !ok || gu != u || gp != h {
			t.Fatalf("proxyAuth(basic(%q, %q)) = %q, %q, %v", u, h, gu, gp, ok)
		}
	})
}

// refusingDialer records every address the proxy dials and refuses them
// all, so that a request ends without any network.
type refusingDialer struct {
	mu     sync.Mutex
	dialed []string
}

func (d *refusingDialer) DialContext(_ context.Context, _, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

func (d *refusingDialer) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dialed
	d.dialed = nil
	return out
}

// answerResolver answers every name with the addresses it holds.
type answerResolver struct {
	mu      sync.Mutex
	answers []netip.Addr
}

func (r *answerResolver) set(as []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = as
}

func (r *answerResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.answers) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return append([]netip.Addr(nil), r.answers...), nil
}

// addrsFrom reads resolver answers from fuzz bytes: a tag byte, even for
// four bytes of IPv4, odd for sixteen of IPv6.
func addrsFrom(b []byte) []netip.Addr {
	var out []netip.Addr
	for len(b) > 0 && len(out) < 8 {
		tag := b[0]
		b = b[1:]
		n := 4
		if tag&1 == 1 {
			n = 16
		}
		var buf [16]byte
		copy(buf[:n], b)
		b = b[min(n, len(b)):]
		if n == 4 {
			out = append(out, netip.AddrFrom4([4]byte(buf[:4])))
		} else {
			out = append(out, netip.AddrFrom16(buf))
		}
	}
	return out
}

// FuzzProxyRequest sends the proxy an authenticated request with a fuzzed
// target (a CONNECT authority or an absolute-form URL) and fuzzed resolver
// answers. Whatever they are, the proxy answers a refusal it names, and it
// only ever dials a public address, on the port the request named, that
// is the literal host or one of the resolver's answers, unmapped.
func FuzzProxyRequest(f *testing.F) {
	v4 := func(s string) []byte { a := netip.MustParseAddr(s).As4(); return append([]byte{0}, a[:]...) }
	v6 := func(s string) []byte { a := netip.MustParseAddr(s).As16(); return append([]byte{1}, a[:]...) }
	pub := v4("93.184.215.14")
	for _, c := range []struct {
		connect bool
		target  string
		answers []byte
	}{
		{true, "example.com:443", pub},
		{true, "example.com:443", append(v4("93.184.215.14"), v4("10.0.0.1")...)},
		{true, "example.com:443", v6("::ffff:127.0.0.1")},
		{true, "example.com:443", v6("::ffff:93.184.215.14")},
		{true, "[::ffff:8.8.8.8]:443", nil},
		{true, "2130706433:80", nil},
		{true, "[64:ff9b::a9fe:a9fe]:80", nil},
		{true, "8.8.8.8:0", nil},
		{true, "8.8.8.8:65536", nil},
		{true, "localhost:22", pub},
		{true, "a.localhost.:22", pub},
		{true, "example.com", pub},
		{true, "/path", pub},
		{false, "http://example.com/", pub},
		{false, "http://example.com:8080/x?y", v6("2606:4700::1111")},
		{false, "http://[::1]/", nil},
		{false, "http://0x7f.1/", nil},
		{false, "http://user:pw@8.8.8.8:+80/", nil},
		{false, "https://example.com/", pub},
		{false, "/relative", pub},
		{false, "http://%65xample.com/", pub},
		{false, "http://exa%00mple.com/", pub},
	} {
		f.Add(c.connect, c.target, c.answers)
	}

	dialer := &refusingDialer{}
	resolver := &answerResolver{}
	p, err := New(Config{
		Authenticate: func(user, pass string) (string, bool) { return user, user == computer && pass == "pw" },
		Resolver:     resolver,
		Dialer:       dialer,
		Abuse:        true,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(p.transport.CloseIdleConnections)
	known := map[Verdict]bool{}
	for _, v := range []Verdict{VerdictBadRequest, VerdictInvalidHost, VerdictBlockedAddress, VerdictAbuseMail,
		VerdictAbuseMining, VerdictDNSFailure, VerdictUpstreamFailure} {
		known[v] = true
	}

	f.Fuzz(func(t *testing.T, connect bool, target string, answers []byte) {
		method := "GET"
		if connect {
			method = "CONNECT"
		}
		raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: h\r\nProxy-Authorization: %s\r\n\r\n", method, target, basic(computer, "pw"))
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 before the proxy sees it
		}
		as := addrsFrom(answers)
		resolver.set(as)
		dialer.take()

		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)

		v := Verdict(w.Header().Get(HeaderRefused))
		if !known[v] {
			t.Fatalf("%s %q: status %d, verdict %q", method, target, w.Code, v)
		}
		if w.Code != v.status() {
			t.Fatalf("%s %q: status %d for verdict %s", method, target, w.Code, v)
		}
		if w.Body.String() != v.message()+"\n" {
			t.Fatalf("%s %q: body %q", method, target, w.Body.String())
		}
		dials := dialer.take()
		if len(dials) > 1 {
			t.Fatalf("%s %q: dialled %v", method, target, dials)
		}
		if (len(dials) == 1) != (v == VerdictUpstreamFailure) {
			t.Fatalf("%s %q: verdict %s after dials %v", method, target, v, dials)
		}
		if len(dials) == 0 {
			return
		}
		ap, err := netip.ParseAddrPort(dials[0])
		if err != nil {
			t.Fatalf("%s %q: dialled %q", method, target, dials[0])
		}
		if !publicOracle(ap.Addr()) || ap.Addr().Is4In6() || ap.Port() == 0 {
			t.Fatalf("%s %q (answers %v): dialled %s", method, target, as, ap)
		}
		if portVerdict(ap.Port()) != VerdictAllowed {
			t.Fatalf("%s %q: dialled abuse port %d", method, target, ap.Port())
		}
		host, port, _, ok := requestTarget(req)
		if pp, pok := parsePort(port); !ok || !pok || pp != ap.Port() {
			t.Fatalf("%s %q: dialled %s, request names port %q", method, target, ap, port)
		}
		ht, _ := parseHost(host)
		if ht.addr.IsValid() {
			if ht.addr.Unmap() != ap.Addr() {
				t.Fatalf("%s %q: dialled %s, host is %s", method, target, ap, ht.addr)
			}
		} else if !slices.ContainsFunc(as, func(a netip.Addr) bool { return a.Unmap() == ap.Addr() }) {
			t.Fatalf("%s %q: dialled %s, not one of the answers %v", method, target, ap, as)
		}
	})
}
