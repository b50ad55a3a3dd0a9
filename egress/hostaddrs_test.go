package egress

import (
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// TestBlockHost: with BlockHost the proxy refuses this host's own public
// address, and one the host gains later once the list is read again;
// without it, that address is just a public one.
func TestBlockHost(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	var mu sync.Mutex
	own := []netip.Addr{publicA}
	h := start(t, func(c *Config) {
		c.BlockHost, c.Clock = true, clk
		c.HostAddrs = func() ([]netip.Addr, error) {
			mu.Lock()
			defer mu.Unlock()
			return append([]netip.Addr(nil), own...), nil
		}
	})
	echo := newEchoServer(t)
	defer echo.close()
	h.dialer.route(ap(publicA, 443), echo.addr())
	h.dialer.route(ap(publicB, 443), echo.addr())
	h.resolver.set("host.example.com", []netip.Addr{publicA})
	h.resolver.set("later.example.com", []netip.Addr{publicB})

	status := func(target string) (int, string) {
		resp, _, c, _ := h.raw("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n" + h.auth() + "\r\n")
		c.Close()
		return resp.StatusCode, resp.Header.Get(HeaderRefused)
	}
	for _, target := range []string{"host.example.com:443", publicA.String() + ":443"} {
		if code, v := status(target); code != http.StatusForbidden || v != string(VerdictBlockedAddress) {
			t.Errorf("CONNECT %s (the host's own address): %d %s, want 403 blocked-address", target, code, v)
		}
	}
	if code, _ := status("later.example.com:443"); code != http.StatusOK {
		t.Fatalf("CONNECT to a public address not the host's: %d", code)
	}
	// The host gains publicB: refused once the list is read again.
	mu.Lock()
	own = append(own, publicB)
	mu.Unlock()
	clk.Advance(hostAddrRefresh)
	if code, v := status("later.example.com:443"); code != http.StatusForbidden || v != string(VerdictBlockedAddress) {
		t.Errorf("CONNECT to an address the host gained: %d %s, want 403 blocked-address", code, v)
	}
}
