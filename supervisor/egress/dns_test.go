package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	typeA    = 1
	typeAAAA = 28
)

// dnsServer is a small authoritative DNS server on loopback UDP. answer
// gives the records for the n-th query (from 0) of a name and type; ok
// false answers NXDOMAIN. Every record has TTL 0.
type dnsServer struct {
	pc      net.PacketConn
	answer  func(name string, qtype uint16, n int) (addrs []netip.Addr, ok bool)
	mu      sync.Mutex
	queries map[string]int // "A name." -> count
	done    chan struct{}
}

func startDNS(t *testing.T, answer func(name string, qtype uint16, n int) ([]netip.Addr, bool)) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{pc: pc, answer: answer, queries: map[string]int{}, done: make(chan struct{})}
	go s.serve()
	t.Cleanup(func() {
		pc.Close()
		<-s.done
	})
	return s
}

// resolver is a *net.Resolver that asks only this server.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", s.pc.LocalAddr().String())
		},
	}
}

func (s *dnsServer) count(qtype, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[qtype+" "+name]
}

func (s *dnsServer) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := s.handle(buf[:n]); resp != nil {
			s.pc.WriteTo(resp, from)
		}
	}
}

// handle answers one query message, or returns nil for garbage.
func (s *dnsServer) handle(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	name, end, err := readName(q, 12)
	if err != nil || end+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end : end+2])
	question := q[12 : end+4]

	key := map[uint16]string{typeA: "A", typeAAAA: "AAAA"}[qtype] + " " + name
	s.mu.Lock()
	n := s.queries[key]
	s.queries[key]++
	s.mu.Unlock()

	var addrs []netip.Addr
	rcode := uint16(0)
	if as, ok := s.answer(name, qtype, n); ok {
		for _, a := range as {
			if (qtype == typeA) == a.Is4() && (qtype == typeA || qtype == typeAAAA) {
				addrs = append(addrs, a)
			}
		}
	} else {
		rcode = 3 // NXDOMAIN
	}

	resp := make([]byte, 12, 512)
	copy(resp[0:2], q[0:2])
	// QR, AA, RD as asked, RA.
	flags := uint16(0x8400|0x0080) | binary.BigEndian.Uint16(q[2:4])&0x0100 | rcode
	binary.BigEndian.PutUint16(resp[2:4], flags)
	binary.BigEndian.PutUint16(resp[4:6], 1)
	binary.BigEndian.PutUint16(resp[6:8], uint16(len(addrs)))
	resp = append(resp, question...)
	for _, a := range addrs {
		resp = append(resp, 0xc0, 12) // the question's name
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 0) // TTL 0
		b := a.AsSlice()
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(b)))
		resp = append(resp, b...)
	}
	return resp
}

// readName reads an uncompressed name at off, returning it with a
// trailing dot and the offset after it.
func readName(m []byte, off int) (string, int, error) {
	var labels []string
	for {
		if off >= len(m) {
			return "", 0, errors.New("short name")
		}
		l := int(m[off])
		off++
		if l == 0 {
			break
		}
		if l > 63 || off+l > len(m) {
			return "", 0, errors.New("bad label")
		}
		labels = append(labels, strings.ToLower(string(m[off:off+l])))
		off += l
	}
	return strings.Join(labels, ".") + ".", off, nil
}

// DNS rebinding against a real DNS server: a public address first, then
// 127.0.0.1, both with TTL 0. The proxy resolves once per connection,
// dials exactly the address it checked, and never connects to loopback.
func TestRebindingRealDNS(t *testing.T) {
	loop := netip.MustParseAddr("127.0.0.1")
	dns := startDNS(t, func(name string, qtype uint16, n int) ([]netip.Addr, bool) {
		switch name {
		case "rebind.test.":
			if n == 0 {
				return []netip.Addr{publicA}, true
			}
			return []netip.Addr{loop}, true
		case "split.test.":
			return []netip.Addr{publicA, netip.MustParseAddr("10.20.30.40")}, true
		case "split6.test.":
			return []netip.Addr{publicA, netip.MustParseAddr("fd00::1")}, true
		}
		return nil, false
	})
	h := start(t, func(c *Config) { c.Resolver = dns.resolver() })
	up := newUpstream(t, false, nil)
	h.dialer.route(ap(publicA, 80), up.addr())
	h.dialer.route(ap(loop, 80), up.addr())

	resp, _, _, _ := h.raw("GET http://rebind.test/ HTTP/1.1\r\nHost: rebind.test\r\n" + h.auth() + "\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %s %s", resp.Status, resp.Header.Get(HeaderRefused))
	}
	if n := dns.count("A", "rebind.test."); n != 1 {
		t.Fatalf("%d A queries for one request", n)
	}
	if r := up.last(t); r.Host != "rebind.test" {
		t.Errorf("upstream Host %q", r.Host)
	}
	for _, req := range []string{
		"GET http://rebind.test/ HTTP/1.1\r\nHost: rebind.test\r\n",
		"CONNECT rebind.test:80 HTTP/1.1\r\nHost: rebind.test:80\r\n",
		"GET http://split.test/ HTTP/1.1\r\nHost: split.test\r\n",
		"CONNECT split6.test:80 HTTP/1.1\r\nHost: split6.test:80\r\n",
		"GET http://nxdomain.test/ HTTP/1.1\r\nHost: nxdomain.test\r\n",
	} {
		resp, raw, _, _ := h.raw(req + h.auth() + "\r\n")
		if resp.StatusCode == http.StatusOK {
			t.Errorf("LET THROUGH: %s", firstLine(req))
		}
		for _, a := range []string{"127.0.0.1", "10.20.30.40", "fd00::1"} {
			if strings.Contains(raw, a) {
				t.Errorf("%s: answer names %s", firstLine(req), a)
			}
		}
	}
	if n := dns.count("A", "rebind.test."); n != 3 {
		t.Errorf("%d A queries for three connections", n)
	}
	if d := h.dialer.dials(); !slices.Equal(d, []netip.AddrPort{ap(publicA, 80)}) {
		t.Fatalf("dialled %v, want only %v", d, ap(publicA, 80))
	}
	if v := h.p.Stats().Verdicts; v[VerdictBlockedAddress] != 4 || v[VerdictDNSFailure] != 1 {
		t.Errorf("verdicts %v", v)
	}
}
