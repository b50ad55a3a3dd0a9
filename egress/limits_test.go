package egress

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

// TestTunnelsPerComputer: 1,000 CONNECTs from one computer: the first 256
// are tunnels, every later one is refused with 429 and too-many-tunnels
// while they stay open; another computer still opens tunnels, and the
// first computer does again once one of its tunnels has closed.
func TestTunnelsPerComputer(t *testing.T) {
	h := start(t, nil)
	echo := newEchoServer(t)
	defer echo.close()
	h.dialer.route(ap(publicA, 443), echo.addr())
	h.resolver.set("tunnels.example.com", []netip.Addr{publicA})

	const tries = 1000
	var open []net.Conn
	refused := 0
	for i := range tries {
		resp, _, c, _ := h.raw("CONNECT tunnels.example.com:443 HTTP/1.1\r\nHost: tunnels.example.com:443\r\n" + h.auth() + "\r\n")
		switch {
		case resp.StatusCode == http.StatusOK:
			if i >= DefaultMaxTunnelsPerComputer {
				t.Fatalf("CONNECT %d was let through past the limit of %d", i+1, DefaultMaxTunnelsPerComputer)
			}
			open = append(open, c)
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get(HeaderRefused) == string(VerdictTooMany):
			if i < DefaultMaxTunnelsPerComputer {
				t.Fatalf("CONNECT %d refused below the limit: %s", i+1, resp.Status)
			}
			refused++
			c.Close()
		default:
			t.Fatalf("CONNECT %d: %s (%s)", i+1, resp.Status, resp.Header.Get(HeaderRefused))
		}
	}
	if len(open) != DefaultMaxTunnelsPerComputer || refused != tries-DefaultMaxTunnelsPerComputer {
		t.Fatalf("%d tunnels open and %d refused, want %d and %d", len(open), refused, DefaultMaxTunnelsPerComputer, tries-DefaultMaxTunnelsPerComputer)
	}

	// Another computer is not affected.
	other, _, _, _ := h.raw("CONNECT tunnels.example.com:443 HTTP/1.1\r\nHost: tunnels.example.com:443\r\nProxy-Authorization: " +
		basic("c-other", deriver(t).Derive(token.Egress, "c-other")) + "\r\n\r\n")
	if other.StatusCode != http.StatusOK {
		t.Fatalf("another computer's CONNECT: %s (%s)", other.Status, other.Header.Get(HeaderRefused))
	}

	// One tunnel closes: the proxy sees the end, and a new one opens.
	open[0].Close()
	testkit.Eventually(t, 10*time.Second, "the closed tunnel to stop counting", func() bool {
		return h.p.slots.open(computer) < DefaultMaxTunnelsPerComputer
	})
	if c, _ := h.connect("tunnels.example.com:443"); c == nil {
		t.Fatal("no tunnel after one closed")
	}
	for _, c := range open[1:] {
		c.Close()
	}
}

// TestTunnelsInAll: MaxTunnels bounds the tunnels of every computer
// together.
func TestTunnelsInAll(t *testing.T) {
	h := start(t, func(c *Config) { c.MaxTunnels = 3 })
	echo := newEchoServer(t)
	defer echo.close()
	h.dialer.route(ap(publicA, 443), echo.addr())
	h.resolver.set("tunnels.example.com", []netip.Addr{publicA})
	for i := range 3 {
		if c, _ := h.connect("tunnels.example.com:" + strconv.Itoa(443)); c == nil {
			t.Fatalf("tunnel %d", i+1)
		}
	}
	other, _, _, _ := h.raw("CONNECT tunnels.example.com:443 HTTP/1.1\r\nHost: tunnels.example.com:443\r\nProxy-Authorization: " +
		basic("c-other", deriver(t).Derive(token.Egress, "c-other")) + "\r\n\r\n")
	if other.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the fourth tunnel in all: %s, want 429", other.Status)
	}
}
