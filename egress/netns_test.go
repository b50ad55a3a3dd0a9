//go:build linux

package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/berthdev/berth/internal/netnstest"
)

// runNetnsTest is the command that runs the network namespace test with
// the privileges it needs.
const runNetnsTest = `sudo env "PATH=$PATH" go test -race -count=1 -run TestAllowedPathNetns ./supervisor/egress/`

// newTestNetns makes a network namespace joined to this one by a veth
// pair (see netnstest.New), after checking that the proxy does not block
// the namespace's address.
func newTestNetns(t *testing.T, ctx context.Context) *netnstest.NS {
	t.Helper()
	netnstest.Require(t, runNetnsTest)
	n := netnstest.New(t, ctx, "eg")
	if newBlocklist(nil).blocked(n.Addr) {
		t.Fatalf("%v is blocked by the proxy; pick another namespace address", n.Addr)
	}
	return n
}

// onlyDialer is a real *net.Dialer that only ever connects to one address;
// it records everything the proxy asks for and refuses, without a packet,
// anything else.
type onlyDialer struct {
	t     *testing.T
	allow netip.Addr
	d     net.Dialer
	mu    sync.Mutex
	asked []string
}

func (o *onlyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	o.mu.Lock()
	o.asked = append(o.asked, address)
	o.mu.Unlock()
	a, err := netip.ParseAddrPort(address)
	if network != "tcp" || err != nil || a.Addr() != o.allow {
		o.t.Errorf("proxy dialled %s %s; only %v may be", network, address, o.allow)
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	return o.d.DialContext(ctx, network, address)
}

func (o *onlyDialer) dials() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.asked)
}

// The allowed path over a real network: an HTTP and a TLS server in a
// network namespace at a public-looking address, a name for it in a real
// DNS server, and the proxy with the system's dialer. Plain requests and
// CONNECT reach the servers; names for loopback and private addresses are
// refused.
func TestAllowedPathNetns(t *testing.T) {
	ctx := testContext(t)
	ns := newTestNetns(t, ctx)
	ns.CheckRoutes(t, ctx)

	// The servers see connections from this side's veth address.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tls := "plain"
		if r.TLS != nil {
			tls = "tls"
		}
		fmt.Fprintf(w, "%s %s%s from %s", tls, r.Host, r.URL.Path, r.RemoteAddr)
	})
	plain := httptest.NewUnstartedServer(handler)
	plain.Listener.Close()
	plain.Listener = ns.Listen(t, netip.AddrPortFrom(ns.Addr, 80).String())
	plain.Start()
	t.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(handler)
	secure.Listener.Close()
	secure.Listener = ns.Listen(t, netip.AddrPortFrom(ns.Addr, 443).String())
	secure.StartTLS()
	t.Cleanup(secure.Close)

	zone := startZoneServer(t)
	zone.set("allowed.berth.test", []netip.Addr{ns.Addr})
	zone.set("loopback.berth.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")})
	zone.set("private.berth.test", []netip.Addr{netip.MustParseAddr("10.0.0.1")})
	dialer := &onlyDialer{t: t, allow: ns.Addr}
	h := start(t, func(c *Config) {
		c.Resolver = zone.resolver()
		c.Dialer = dialer
	})

	tr := secure.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com" // the name in httptest's certificate
	client := h.client(tr)
	for _, c := range []struct{ url, want string }{
		{"http://allowed.berth.test/plain", "plain allowed.berth.test/plain from " + ns.Local.String() + ":"},
		{"https://allowed.berth.test/secure", "tls allowed.berth.test/secure from " + ns.Local.String() + ":"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", c.url, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), c.want) {
			t.Fatalf("GET %s: %s %s %q, %v; want %q", c.url, resp.Status, resp.Header.Get(HeaderRefused), body, err, c.want)
		}
	}
	client.CloseIdleConnections()

	for _, host := range []string{"loopback.berth.test", "private.berth.test"} {
		for _, req := range []string{
			"GET http://" + host + "/ HTTP/1.1\r\nHost: " + host + "\r\n",
			"CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + ":443\r\n",
		} {
			resp, raw, _, _ := h.raw(req + h.auth() + "\r\n")
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRefused) != string(VerdictBlockedAddress) {
				t.Errorf("%s: %s %s, want 403 %s", firstLine(req), resp.Status, resp.Header.Get(HeaderRefused), VerdictBlockedAddress)
			}
			if strings.Contains(raw, "127.0.0.1") || strings.Contains(raw, "10.0.0.1") {
				t.Errorf("%s: answer names the address:\n%s", firstLine(req), raw)
			}
		}
	}

	want := []string{
		netip.AddrPortFrom(ns.Addr, 80).String(),
		netip.AddrPortFrom(ns.Addr, 443).String(),
	}
	if d := dialer.dials(); !slices.Equal(d, want) {
		t.Errorf("dialled %v, want %v", d, want)
	}
}
