package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// upstream is a loopback HTTP server that records the requests it gets.
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func newUpstream(t *testing.T, tls bool, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, r)
		u.body = append(u.body, string(b))
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	})
	if tls {
		u.srv = httptest.NewTLSServer(handler)
	} else {
		u.srv = httptest.NewServer(handler)
	}
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return u.srv.Listener.Addr().String() }

func (u *upstream) last(t *testing.T) *http.Request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("upstream got no request")
	}
	return u.reqs[len(u.reqs)-1]
}

func TestPlainAndConnectThroughHTTPClient(t *testing.T) {
	h := start(t, nil)
	plain := newUpstream(t, false, nil)
	secure := newUpstream(t, true, nil)
	h.resolver.set("example.com", []netip.Addr{publicA, public6})
	h.dialer.route(ap(publicA, 80), plain.addr())
	h.dialer.route(ap(publicA, 443), secure.addr())

	c := h.client(secure.srv.Client().Transport.(*http.Transport))
	ctx := testContext(t)
	for _, tc := range []struct {
		url, want string
		dial      netip.AddrPort
	}{
		{"http://example.com/plain", "hello from example.com/plain", ap(publicA, 80)},
		{"https://example.com/secure", "hello from example.com/secure", ap(publicA, 443)},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tc.url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != tc.want {
			t.Fatalf("GET %s: %s %q", tc.url, resp.Status, body)
		}
		if d := h.dialer.dials(); d[len(d)-1] != tc.dial {
			t.Fatalf("GET %s dialled %v, want %v", tc.url, d, tc.dial)
		}
	}
	// Exactly the first checked address, once per connection, nothing else.
	for _, d := range h.dialer.dials() {
		if d.Addr() != publicA {
			t.Errorf("dialled %v", d)
		}
	}
	if n := h.resolver.count("example.com"); n != 2 {
		t.Errorf("resolved example.com %d times, want once per connection (2)", n)
	}
	c.CloseIdleConnections()
	testkit.EventuallyContext(t, testContext(t), "no connection left active", func() bool { return h.p.Stats().Active == 0 })
	st := h.p.Stats()
	if st.Verdicts[VerdictAllowed] != 2 || st.BytesDown == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestAuth(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, nil)
	h.resolver.set("example.com", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 80), up.addr())
	echo := newEchoServer(t)
	h.dialer.route(ap(publicA, 443), echo.addr())

	other := deriver(t)
	cases := []struct {
		name, header string
		want         int
	}{
		{"none", "", http.StatusProxyAuthRequired},
		{"wrong password", "Proxy-Authorization: " + basic(computer, "nope") + "\r\n", http.StatusProxyAuthRequired},
		{"another computer's password", "Proxy-Authorization: " + basic(computer, other.Derive("egress", "c-other")) + "\r\n", http.StatusProxyAuthRequired},
		{"unknown computer", "Proxy-Authorization: " + basic("c-unknown", other.Derive("egress", "c-unknown")) + "\r\n", http.StatusProxyAuthRequired},
		{"computerd token", "Proxy-Authorization: " + basic(computer, other.Derive("computerd", computer)) + "\r\n", http.StatusProxyAuthRequired},
		{"bearer", "Proxy-Authorization: Bearer " + h.password + "\r\n", http.StatusProxyAuthRequired},
		{"not base64", "Proxy-Authorization: Basic !!!\r\n", http.StatusProxyAuthRequired},
		{"right", h.auth(), http.StatusOK},
		{"right, lower-case scheme", "Proxy-Authorization: basic " + strings.TrimPrefix(basic(computer, h.password), "Basic ") + "\r\n", http.StatusOK},
	}
	for _, tc := range cases {
		for _, req := range []string{
			"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n" + tc.header + "\r\n",
			"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n" + tc.header + "\r\n",
		} {
			resp, _, _, _ := h.raw(req)
			if resp.StatusCode != tc.want {
				t.Errorf("%s, %s: %s", tc.name, firstLine(req), resp.Status)
				continue
			}
			if tc.want == http.StatusProxyAuthRequired {
				if got := resp.Header.Get("Proxy-Authenticate"); !strings.HasPrefix(got, "Basic ") {
					t.Errorf("%s: Proxy-Authenticate %q", tc.name, got)
				}
				if got := resp.Header.Get(HeaderRefused); got != string(VerdictAuth) {
					t.Errorf("%s: %s %q", tc.name, HeaderRefused, got)
				}
			}
		}
	}
	// Unauthenticated requests were never resolved.
	if n := h.resolver.count("example.com"); n != 4 {
		t.Errorf("resolved %d times, want 4 (the authenticated requests only)", n)
	}
	if strings.Contains(h.logs.String(), h.password) {
		t.Error("the log holds the password")
	}
}

// hopHeaders answers "ok" with hop-by-hop headers (one named in
// Connection), an upstream's proxy challenge and an end-to-end header.
func hopHeaders(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "X-Up-Hop")
	w.Header().Set("X-Up-Hop", "1")
	w.Header().Set("Keep-Alive", "timeout=5")
	w.Header().Set("Proxy-Authenticate", "Basic realm=upstream")
	w.Header().Set("X-End", "kept")
	io.WriteString(w, "ok")
}

func TestHeadersForwarded(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, hopHeaders)
	h.resolver.set("example.com", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 8080), up.addr())

	resp, raw, _, _ := h.raw("POST http://example.com:8080/path?q=1 HTTP/1.1\r\n" +
		"Host: evil.internal\r\n" +
		h.auth() +
		"Proxy-Connection: keep-alive\r\n" +
		"Connection: X-Hop, keep-alive\r\n" +
		"X-Hop: secret-hop\r\n" +
		"Keep-Alive: 300\r\n" +
		"Upgrade: websocket\r\n" +
		"Te: trailers\r\n" +
		"X-Forwarded-For: 10.9.9.9\r\n" +
		"X-End: kept\r\n" +
		"Content-Length: 5\r\n\r\nhello")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s\n%s", resp.Status, raw)
	}
	r := up.last(t)
	if r.Host != "example.com:8080" {
		t.Errorf("upstream Host %q", r.Host)
	}
	if r.URL.RequestURI() != "/path?q=1" || r.Method != http.MethodPost {
		t.Errorf("upstream request %s %s", r.Method, r.URL.RequestURI())
	}
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "Upgrade", "X-Forwarded-For"} {
		if v := r.Header.Get(k); v != "" {
			t.Errorf("upstream got %s: %q", k, v)
		}
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, h.password) {
				t.Errorf("upstream header %s carries the password", k)
			}
		}
	}
	if r.Header.Get("X-End") != "kept" {
		t.Error("end-to-end header dropped")
	}
	if got := up.body[len(up.body)-1]; got != "hello" {
		t.Errorf("upstream body %q", got)
	}
	for _, k := range []string{"X-Up-Hop", "Keep-Alive", "Proxy-Authenticate"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("client got %s: %q", k, v)
		}
	}
	if resp.Header.Get("X-End") != "kept" {
		t.Error("end-to-end response header dropped")
	}
	if d := h.dialer.dials(); !slices.Equal(d, []netip.AddrPort{ap(publicA, 8080)}) {
		t.Errorf("dialled %v", d)
	}
}

// A tunnel carries bytes the client sent along with its CONNECT, and each
// direction ends on its own.
func TestConnectEarlyBytesAndHalfClose(t *testing.T) {
	h := start(t, nil)
	echo := newEchoServer(t)
	h.resolver.set("echo.example", []netip.Addr{publicB})
	h.dialer.route(ap(publicB, 7), echo.addr())

	resp, _, c, br := h.raw("CONNECT echo.example:7 HTTP/1.1\r\nHost: echo.example:7\r\n" + h.auth() + "\r\nearly-")
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	io.WriteString(c, "late")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "early-latebye" {
		t.Fatalf("got %q", got)
	}
	if echo.received() != "early-late" {
		t.Fatalf("upstream got %q", echo.received())
	}
	c.Close()
	testkit.EventuallyContext(t, testContext(t), "no connection left active", func() bool { return h.p.Stats().Active == 0 })
	st := h.p.Stats()
	if st.BytesUp != 10 || st.BytesDown != 13 {
		t.Errorf("bytes up %d down %d", st.BytesUp, st.BytesDown)
	}
	if !strings.Contains(h.logs.String(), "up=10 down=13") {
		t.Errorf("log lacks the byte counts:\n%s", h.logs.String())
	}
}

// DNS rebinding: the resolver answers a public address first and loopback
// after. Each connection resolves once and dials what it checked; the
// second connection sees loopback and is refused.
func TestRebinding(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, nil)
	h.resolver.set("rebind.example",
		[]netip.Addr{publicA},
		[]netip.Addr{netip.MustParseAddr("127.0.0.1")})
	h.dialer.route(ap(publicA, 80), up.addr())
	h.dialer.route(ap(netip.MustParseAddr("127.0.0.1"), 80), up.addr())

	resp, _, _, _ := h.raw("GET http://rebind.example/ HTTP/1.1\r\nHost: rebind.example\r\n" + h.auth() + "\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %s", resp.Status)
	}
	if n := h.resolver.count("rebind.example"); n != 1 {
		t.Fatalf("resolved %d times for one request", n)
	}
	resp, raw, _, _ := h.raw("GET http://rebind.example/ HTTP/1.1\r\nHost: rebind.example\r\n" + h.auth() + "\r\n")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRefused) != string(VerdictBlockedAddress) {
		t.Fatalf("second: %s", resp.Status)
	}
	if strings.Contains(raw, "127.0.0.1") {
		t.Errorf("refusal echoes the address:\n%s", raw)
	}
	if d := h.dialer.dials(); !slices.Equal(d, []netip.AddrPort{ap(publicA, 80)}) {
		t.Fatalf("dialled %v, want only %v", d, ap(publicA, 80))
	}
}

// refusedForm is a host that must be refused, with what the resolver
// answers for it (nothing for literals).
type refusedForm struct {
	host    string
	answers []string
	verdict Verdict
}

// refusedForms are the forms no computer may reach: every range, every
// encoding of an address, and names that resolve to them.
var refusedForms = []refusedForm{
	// literals in each blocked IPv4 range
	{host: "0.0.0.0"}, {host: "10.0.0.1"}, {host: "100.64.0.1"}, {host: "127.0.0.1"},
	{host: "127.255.255.254"}, {host: "169.254.169.254"}, {host: "172.16.0.1"},
	{host: "172.31.255.255"}, {host: "192.0.0.1"}, {host: "192.0.2.1"}, {host: "192.88.99.1"},
	{host: "192.168.1.1"}, {host: "198.18.0.1"}, {host: "198.51.100.1"}, {host: "203.0.113.1"},
	{host: "224.0.0.1"}, {host: "240.0.0.1"}, {host: "255.255.255.255"},
	// literals in each blocked IPv6 range
	{host: "[::]"}, {host: "[::1]"}, {host: "[fc00::1]"}, {host: "[fd00::1]"}, {host: "[fe80::1]"},
	{host: "[ff02::1]"}, {host: "[2001:db8::1]"}, {host: "[100::1]"},
	// IPv4 embedded in IPv6
	{host: "[::ffff:127.0.0.1]"}, {host: "[::ffff:a9fe:a9fe]"}, {host: "[::ffff:10.0.0.1]"},
	{host: "[64:ff9b::7f00:1]"}, {host: "[64:ff9b::169.254.169.254]"},
	{host: "[2002:7f00:1::1]"}, {host: "[2002:c0a8:101::1]"},
	{host: "[2001:0:5ef5:79fd::80ff:fffe]"}, {host: "[2001:0:a00:1::f7f7:f7f7]"},
	// numeric forms read as inet_aton does
	{host: "2130706433"}, {host: "0x7f000001"}, {host: "017700000001"}, {host: "127.1"},
	{host: "0177.0.0.1"}, {host: "0x7f.0.0.1"}, {host: "127.0.0.1."}, {host: "0"},
	{host: "0xa9fea9fe"}, {host: "2852039166"}, {host: "169.254.43518"}, {host: "0251.0376.0251.0376"},
	{host: "3232235777"}, {host: "012.0.0.1"},
	// names that mean this machine whatever DNS says
	{host: "localhost"}, {host: "api.localhost"},
	// the host and VM names of container engines, even where they resolve
	// to a public address (Docker Desktop with the host's own)
	{host: "host.docker.internal", answers: []string{"93.184.215.14"}},
	{host: "gateway.docker.internal", answers: []string{"93.184.215.14"}},
	{host: "HOST.Docker.Internal.", answers: []string{"93.184.215.14"}},
	{host: "docker.for.mac.localhost", answers: []string{"93.184.215.14"}},
	{host: "docker.for.win.host.internal", answers: []string{"93.184.215.14"}},
	{host: "host.containers.internal", answers: []string{"93.184.215.14"}},
	// names that resolve to blocked addresses
	{host: "loop.example", answers: []string{"127.0.0.1"}},
	{host: "meta.example", answers: []string{"169.254.169.254"}},
	{host: "lan.example", answers: []string{"192.168.0.10"}},
	{host: "cgnat.example", answers: []string{"100.100.100.100"}},
	{host: "ula.example", answers: []string{"fd12::1"}},
	{host: "mapped.example", answers: []string{"::ffff:10.1.2.3"}},
	{host: "nat64.example", answers: []string{"64:ff9b::a00:1"}},
	{host: "teredo.example", answers: []string{"2001:0:5ef5:79fd::80ff:fffe"}},
	{host: "public-then-private.example", answers: []string{"93.184.215.14", "10.1.2.3"}},
	{host: "private-then-public.example", answers: []string{"10.1.2.3", "93.184.215.14"}},
	{host: "v6-private.example", answers: []string{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", "fe80::1"}},
	{host: "operator.example", answers: []string{"151.101.1.69"}}, // EGRESS_BLOCKED_CIDRS
	{host: "151.101.1.69"},
	{host: "[::ffff:151.101.1.69]"},
	// hosts that are neither a name nor an address
	{host: "1.2.3.4.5", verdict: VerdictInvalidHost},
	{host: "256.1.1.1", verdict: VerdictInvalidHost},
	{host: "example.0x7f", verdict: VerdictInvalidHost},
	{host: "[fe80::1%25eth0]", verdict: VerdictInvalidHost},
}

// TestRefusedForms sends every refused form as a plain request and as a
// CONNECT. It fails if any of them gets a dial, an answer other than the
// refusal, or an answer that names the address.
func TestRefusedForms(t *testing.T) {
	if len(refusedForms) < 40 {
		t.Fatalf("only %d forms", len(refusedForms))
	}
	h := start(t, func(c *Config) {
		c.BlockedCIDRs = []netip.Prefix{netip.MustParsePrefix("151.101.0.0/16")}
	})
	echo := newEchoServer(t)
	var internal []string
	for _, f := range refusedForms {
		var as []netip.Addr
		for _, s := range f.answers {
			a := netip.MustParseAddr(s)
			as = append(as, a)
			if a != publicA && a != public6 {
				internal = append(internal, s)
			}
			// Were the proxy to dial, it would reach a live server.
			h.dialer.route(ap(a.Unmap(), 80), echo.addr())
			h.dialer.route(ap(a.Unmap(), 443), echo.addr())
		}
		if as != nil {
			h.resolver.set(f.host, as)
		}
	}
	for _, f := range refusedForms {
		want := f.verdict
		if want == "" {
			want = VerdictBlockedAddress
		}
		hostport := f.host + ":443"
		for _, req := range []string{
			"GET http://" + f.host + "/ HTTP/1.1\r\nHost: " + f.host + "\r\n" + h.auth() + "\r\n",
			"CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n" + h.auth() + "\r\n",
		} {
			resp, raw, _, _ := h.raw(req)
			if resp.StatusCode == http.StatusOK {
				t.Errorf("LET THROUGH: %s", firstLine(req))
				continue
			}
			if got := resp.Header.Get(HeaderRefused); got != string(want) {
				t.Errorf("%s: %s %s=%q, want %s", firstLine(req), resp.Status, HeaderRefused, got, want)
			}
			if resp.StatusCode != want.status() {
				t.Errorf("%s: %s", firstLine(req), resp.Status)
			}
			for _, a := range internal {
				if strings.Contains(raw, a) {
					t.Errorf("%s: answer names %s:\n%s", firstLine(req), a, raw)
				}
			}
		}
	}
	if d := h.dialer.dials(); len(d) != 0 {
		t.Errorf("dialled %v", d)
	}
	if got := echo.received(); got != "" {
		t.Errorf("a server got %q", got)
	}
	// Names that look numeric never reach the resolver.
	h.resolver.mu.Lock()
	lookups := slices.Clone(h.resolver.lookups)
	h.resolver.mu.Unlock()
	for _, l := range lookups {
		if endsInNumber(strings.TrimSuffix(l, ".")) || strings.Contains(l, "localhost") {
			t.Errorf("resolver asked for %q", l)
		}
	}
	var refused int
	for _, ev := range h.events.list() {
		if ev.Type != EventRefused || ev.ComputerID != computer || ev.Verdict != VerdictBlockedAddress {
			t.Errorf("event %+v", ev)
		}
		refused++
	}
	if want := 2 * (len(refusedForms) - 4); refused != want {
		t.Errorf("%d refusal events, want %d", refused, want)
	}
	if got := h.p.Stats().Verdicts[VerdictBlockedAddress]; got != uint64(refused) {
		t.Errorf("stats count %d refusals", got)
	}
}

func TestBadRequests(t *testing.T) {
	h := start(t, nil)
	for _, tc := range []struct {
		req  string
		want Verdict
	}{
		{"GET / HTTP/1.1\r\nHost: example.com\r\n", VerdictBadRequest},
		{"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n", VerdictBadRequest},
		{"GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n", VerdictBadRequest},
		{"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n", VerdictBadRequest},
		{"CONNECT example.com:0 HTTP/1.1\r\nHost: example.com:0\r\n", VerdictBadRequest},
		{"CONNECT example.com:65536 HTTP/1.1\r\nHost: example.com:65536\r\n", VerdictBadRequest},
		{"CONNECT /path HTTP/1.1\r\nHost: example.com:443\r\n", VerdictBadRequest},
		{"GET http://exa_mple..com/ HTTP/1.1\r\nHost: x\r\n", VerdictInvalidHost},
	} {
		resp, _, _, _ := h.raw(tc.req + h.auth() + "\r\n")
		if got := resp.Header.Get(HeaderRefused); got != string(tc.want) || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s %q, want 400 %s", firstLine(tc.req), resp.Status, got, tc.want)
		}
	}
	if d := h.dialer.dials(); len(d) != 0 {
		t.Errorf("dialled %v", d)
	}
}

func TestUpstreamFailures(t *testing.T) {
	h := start(t, nil)
	h.resolver.set("down.example", []netip.Addr{publicA}) // no route: refused
	h.resolver.fail("nxdomain.example", &net.DNSError{Err: "no such host", Name: "nxdomain.example", Server: "10.9.8.7:53", IsNotFound: true})
	h.resolver.set("empty.example", []netip.Addr{})
	for _, tc := range []struct {
		host string
		want Verdict
	}{
		{"down.example", VerdictUpstreamFailure},
		{"nxdomain.example", VerdictDNSFailure},
		{"empty.example", VerdictDNSFailure},
	} {
		for _, req := range []string{
			"GET http://" + tc.host + "/ HTTP/1.1\r\nHost: " + tc.host + "\r\n" + h.auth() + "\r\n",
			"CONNECT " + tc.host + ":443 HTTP/1.1\r\nHost: " + tc.host + ":443\r\n" + h.auth() + "\r\n",
		} {
			resp, raw, _, _ := h.raw(req)
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderRefused) != string(tc.want) {
				t.Errorf("%s: %s %q, want 502 %s", firstLine(req), resp.Status, resp.Header.Get(HeaderRefused), tc.want)
			}
			for _, leak := range []string{"10.9.8.7", "93.184.215.14", "refused"} {
				if strings.Contains(raw, leak) {
					t.Errorf("%s: answer carries %q:\n%s", firstLine(req), leak, raw)
				}
			}
		}
	}
	if len(h.events.list()) != 0 {
		t.Errorf("failures reported as refusals: %v", h.events.list())
	}
	st := h.p.Stats()
	if st.Verdicts[VerdictUpstreamFailure] != 2 || st.Verdicts[VerdictDNSFailure] != 4 {
		t.Errorf("stats %v", st.Verdicts)
	}
}

// Every connection is logged once, at its end, with the computer and what
// happened, and never with the password.
func TestLogLines(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, nil)
	h.resolver.set("example.com", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 80), up.addr())
	h.raw("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + h.auth() + "\r\n")
	// A kept connection's answer leaves before its request is logged.
	testkit.EventuallyContext(t, testContext(t), "the GET logged", func() bool { return strings.Count(h.logs.String(), "egress connection") == 1 })
	h.raw("CONNECT 10.0.0.1:22 HTTP/1.1\r\nHost: 10.0.0.1:22\r\n" + h.auth() + "\r\n")
	h.raw("CONNECT example.com:22 HTTP/1.1\r\nHost: example.com:22\r\nProxy-Authorization: " + basic(computer, "guess-"+h.password) + "\r\n\r\n")
	testkit.EventuallyContext(t, testContext(t), "three egress connection log lines", func() bool { return strings.Count(h.logs.String(), "egress connection") == 3 })
	lines := strings.Split(strings.TrimSpace(h.logs.String()), "\n")
	want := [][]string{
		{"computer=" + computer, "method=GET", "host=example.com", "port=80", "verdict=allowed", "addr=93.184.215.14", "down=", "duration="},
		{"computer=" + computer, "method=CONNECT", "host=10.0.0.1", "port=22", "verdict=blocked-address"},
		{"computer=\"\"", "method=CONNECT", "verdict=auth-required"},
	}
	var got []string
	for _, l := range lines {
		if strings.Contains(l, "egress connection") {
			got = append(got, l)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("log lines:\n%s", strings.Join(got, "\n"))
	}
	for i, l := range got {
		for _, w := range want[i] {
			if !strings.Contains(l, w) {
				t.Errorf("line %d lacks %q: %s", i, w, l)
			}
		}
		if strings.Contains(l, h.password) {
			t.Errorf("line %d holds the password", i)
		}
	}
}

func TestNewConfig(t *testing.T) {
	auth := func(string, string) (string, bool) { return "", false }
	r, d := newFakeResolver(), newMapDialer(t)
	for name, cfg := range map[string]Config{
		"no auth":     {Resolver: r, Dialer: d},
		"no resolver": {Authenticate: auth, Dialer: d},
		"no dialer":   {Authenticate: auth, Resolver: r},
		"bad prefix":  {Authenticate: auth, Resolver: r, Dialer: d, BlockedCIDRs: []netip.Prefix{{}}},
		"negative":    {Authenticate: auth, Resolver: r, Dialer: d, IdleTimeout: -time.Second},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	p, err := New(Config{Authenticate: auth, Resolver: r, Dialer: d})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.IdleTimeout != DefaultIdleTimeout || p.cfg.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("defaults not applied: %+v", p.cfg)
	}
}

// The proxy works as a plain http.Handler inside another server too.
func TestAsHandler(t *testing.T) {
	d := deriver(t)
	r, dl := newFakeResolver(), newMapDialer(t)
	p, err := New(Config{Authenticate: authenticator(d, computer), Resolver: r, Dialer: dl})
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, false, nil)
	r.set("example.com", []netip.Addr{publicA})
	dl.route(ap(publicA, 80), up.addr())
	defer p.closeIdle()
	req := httptest.NewRequestWithContext(testContext(t), http.MethodGet, "http://example.com/h", nil)
	req.Header.Set("Proxy-Authorization", basic(computer, d.Derive("egress", computer)))
	w := httptest.NewRecorder()
	p.ServeHTTP(w, req)
	if w.Code != http.StatusOK || w.Body.String() != "hello from example.com/h" {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
}
