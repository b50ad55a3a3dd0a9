package egress

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zoneServer is an authoritative DNS server on loopback UDP, built on
// github.com/miekg/dns. Each name has a list of answers: the n-th query of
// a type (from 0) gets the n-th answer, the last one repeating, filtered to
// that type. Every record has TTL 0. Unknown names get NXDOMAIN.
type zoneServer struct {
	addr    string
	mu      sync.Mutex
	answers map[string][][]netip.Addr // by lower-case fully qualified name
	queries map[string]int            // "A name." -> count
}

func startZoneServer(t testing.TB) *zoneServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &zoneServer{
		addr:    pc.LocalAddr().String(),
		answers: map[string][][]netip.Addr{},
		queries: map[string]int{},
	}
	started := make(chan struct{})
	srv := &dns.Server{
		PacketConn:        pc,
		Handler:           dns.HandlerFunc(s.serveDNS),
		NotifyStartedFunc: func() { close(started) },
	}
	served := make(chan error, 1)
	go func() { served <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-served:
		t.Fatalf("DNS server: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("DNS server did not start")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.ShutdownContext(ctx); err != nil {
			t.Errorf("DNS server shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("DNS server: %v", err)
		}
	})
	return s
}

// set gives name (with or without the trailing dot) its answers, one per
// query of each type.
func (s *zoneServer) set(name string, answers ...[]netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[dns.Fqdn(strings.ToLower(name))] = answers
}

// count is the number of queries of qtype ("A", "AAAA") for name.
func (s *zoneServer) count(qtype, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[qtype+" "+dns.Fqdn(strings.ToLower(name))]
}

// resolver is a pure-Go *net.Resolver that asks only this server.
func (s *zoneServer) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", s.addr)
		},
	}
}

func (s *zoneServer) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	if len(req.Question) != 1 {
		w.WriteMsg(m.SetRcodeFormatError(req))
		return
	}
	m.SetReply(req)
	m.Authoritative = true
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	key := dns.TypeToString[q.Qtype] + " " + name
	s.mu.Lock()
	n := s.queries[key]
	s.queries[key]++
	as, ok := s.answers[name]
	s.mu.Unlock()
	if !ok || len(as) == 0 {
		w.WriteMsg(m.SetRcode(req, dns.RcodeNameError))
		return
	}
	for _, a := range as[min(n, len(as)-1)] {
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 0}
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case q.Qtype == dns.TypeAAAA && a.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	w.WriteMsg(m)
}

// DNS rebinding against a real DNS server (miekg/dns): names answer a
// public address first and a loopback one on every later query, TTL 0. The
// first connection to each goes to the public address, every later one is
// refused, and the proxy never asks its dialer for a loopback or otherwise
// blocked address, although the test dialer would connect it to a live
// server.
func TestRebindingMiekgDNS(t *testing.T) {
	loop4 := netip.MustParseAddr("127.0.0.1")
	loop6 := netip.MustParseAddr("::1")
	zone := startZoneServer(t)
	zone.set("rebind.berth.test", []netip.Addr{publicA}, []netip.Addr{loop4})
	zone.set("tunnel.berth.test", []netip.Addr{publicA}, []netip.Addr{loop4})
	zone.set("keepalive.berth.test", []netip.Addr{publicA}, []netip.Addr{loop4})
	zone.set("rebind6.berth.test", []netip.Addr{publicA}, []netip.Addr{loop6})
	zone.set("mixed.berth.test", []netip.Addr{publicA, loop4})

	h := start(t, func(c *Config) { c.Resolver = zone.resolver() })
	up := newUpstream(t, false, nil)
	echo := newEchoServer(t)
	for _, a := range []netip.Addr{publicA, loop4, loop6} {
		h.dialer.route(ap(a, 80), up.addr())
		h.dialer.route(ap(a, 443), echo.addr())
	}
	ctx := testContext(t)

	// The first answer is what is dialled, after a single query.
	for _, name := range []string{"rebind.berth.test", "rebind6.berth.test"} {
		resp, _, _, _ := h.raw("GET http://" + name + "/first HTTP/1.1\r\nHost: " + name + "\r\n" + h.auth() + "\r\n")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "hello from "+name+"/first" {
			t.Fatalf("first GET %s: %s %s %q", name, resp.Status, resp.Header.Get(HeaderRefused), body)
		}
		if n := zone.count("A", name); n != 1 {
			t.Errorf("%s: %d A queries for one request", name, n)
		}
		h.waitIdleUpstream(ap(publicA, 80))
	}
	// The proxy keeps its upstream connection to a checked address open,
	// so the second name reuses the first one's.
	if d := h.dialer.dials(); !slices.Equal(d, []netip.AddrPort{ap(publicA, 80)}) {
		t.Errorf("dialled %v, want %v", d, ap(publicA, 80))
	}
	c, br := h.connect("tunnel.berth.test:443")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("tunnel echoed %q, %v", got, err)
	}
	c.Close()
	if n := zone.count("A", "tunnel.berth.test"); n != 1 {
		t.Errorf("%d A queries for one tunnel", n)
	}
	if d := h.dialer.dials(); d[len(d)-1] != ap(publicA, 443) {
		t.Errorf("tunnel dialled %v, want %v", d[len(d)-1], ap(publicA, 443))
	}

	// A client that keeps its connection to the proxy open is checked on
	// every request, not once per connection.
	client := h.client(nil)
	for i, want := range []int{http.StatusOK, http.StatusForbidden} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://keepalive.berth.test/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("keep-alive request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("keep-alive request %d: %s %s, want %d", i, resp.Status, resp.Header.Get(HeaderRefused), want)
		}
	}
	client.CloseIdleConnections()

	// Every later query answers loopback; a mixed answer is refused.
	for _, req := range []string{
		"GET http://rebind.berth.test/ HTTP/1.1\r\nHost: rebind.berth.test\r\n",
		"CONNECT rebind.berth.test:443 HTTP/1.1\r\nHost: rebind.berth.test:443\r\n",
		"GET http://rebind6.berth.test/ HTTP/1.1\r\nHost: rebind6.berth.test\r\n",
		"CONNECT tunnel.berth.test:443 HTTP/1.1\r\nHost: tunnel.berth.test:443\r\n",
		"GET http://mixed.berth.test/ HTTP/1.1\r\nHost: mixed.berth.test\r\n",
		"CONNECT mixed.berth.test:443 HTTP/1.1\r\nHost: mixed.berth.test:443\r\n",
	} {
		resp, raw, _, _ := h.raw(req + h.auth() + "\r\n")
		if resp.StatusCode == http.StatusOK {
			t.Errorf("LET THROUGH: %s", firstLine(req))
			continue
		}
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRefused) != string(VerdictBlockedAddress) {
			t.Errorf("%s: %s %s", firstLine(req), resp.Status, resp.Header.Get(HeaderRefused))
		}
		for _, a := range []string{"127.0.0.1", "::1"} {
			if strings.Contains(raw, a) {
				t.Errorf("%s: answer names %s:\n%s", firstLine(req), a, raw)
			}
		}
	}

	dials := h.dialer.dials()
	if len(dials) < 2 {
		t.Errorf("dialled %v, want connections to %v and %v", dials, ap(publicA, 80), ap(publicA, 443))
	}
	for _, d := range dials {
		if d.Addr().IsLoopback() || h.p.block.blocked(d.Addr()) {
			t.Errorf("CONNECTED TO %v", d)
		} else if d.Addr() != publicA {
			t.Errorf("dialled %v, not the first answer %v", d, publicA)
		}
	}
	if got := echo.received(); got != "ping" {
		t.Errorf("echo server got %q, want only the tunnel's ping", got)
	}
	up.mu.Lock()
	n := len(up.reqs)
	up.mu.Unlock()
	if n != 3 {
		t.Errorf("upstream got %d requests, want 3", n)
	}
}

// TestUnknownNameMiekgDNS: a name the DNS server does not know is a 502
// dns-failure, and nothing is dialled.
func TestUnknownNameMiekgDNS(t *testing.T) {
	zone := startZoneServer(t)
	h := start(t, func(c *Config) { c.Resolver = zone.resolver() })
	for _, req := range []string{
		"GET http://nxdomain.berth.test/ HTTP/1.1\r\nHost: nxdomain.berth.test\r\n",
		"CONNECT nxdomain.berth.test:443 HTTP/1.1\r\nHost: nxdomain.berth.test:443\r\n",
	} {
		resp, _, _, _ := h.raw(req + h.auth() + "\r\n")
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderRefused) != string(VerdictDNSFailure) {
			t.Errorf("%s: %s %q, want 502 %s", firstLine(req), resp.Status, resp.Header.Get(HeaderRefused), VerdictDNSFailure)
		}
	}
	if d := h.dialer.dials(); len(d) != 0 {
		t.Errorf("dialled %v for a name that does not resolve", d)
	}
}
