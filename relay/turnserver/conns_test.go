package turnserver_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay/turnserver"
)

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closed c within d (a read ends
// in EOF or a reset, not in the deadline).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestConnLimits: past MaxConnsPerIP from one address, or MaxConns in
// all, a TCP connection is closed at once; the others stay open.
func TestConnLimits(t *testing.T) {
	s, _, tcp := server(t, turnserver.Config{MaxConns: 3, MaxConnsPerIP: 2, FirstByteTimeout: time.Minute})
	a1, a2 := dialFrom(t, "127.0.0.1", tcp), dialFrom(t, "127.0.0.1", tcp)
	a3 := dialFrom(t, "127.0.0.1", tcp)
	if !closedWithin(a3, 2*time.Second) {
		t.Error("a third connection from one address stayed open (MaxConnsPerIP 2)")
	}
	b1 := dialFrom(t, "127.0.0.2", tcp)
	c1 := dialFrom(t, "127.0.0.3", tcp)
	if !closedWithin(c1, 2*time.Second) {
		t.Error("a fourth connection in all stayed open (MaxConns 3)")
	}
	for i, c := range []net.Conn{a1, a2, b1} {
		if closedWithin(c, 200*time.Millisecond) {
			t.Errorf("connection %d within the limits was closed", i+1)
		}
	}
	if open, refused, _ := s.Conns(); open != 3 || refused != 2 {
		t.Errorf("Conns: %d open, %d refused; want 3 and 2", open, refused)
	}
	// A slot given back is taken again.
	a1.Close()
	testkit.Eventually(t, 5*time.Second, "the closed connection to give its slot back", func() bool {
		open, _, _ := s.Conns()
		return open == 2
	})
	if a4 := dialFrom(t, "127.0.0.1", tcp); closedWithin(a4, 200*time.Millisecond) {
		t.Error("no slot after a connection closed")
	}
}

// TestConnSilence: a connection that never speaks is closed after
// FirstByteTimeout, one that spoke and fell silent after IdleTimeout;
// their slots are given back.
func TestConnSilence(t *testing.T) {
	s, _, tcp := server(t, turnserver.Config{FirstByteTimeout: 300 * time.Millisecond, IdleTimeout: 800 * time.Millisecond})
	silent := dialFrom(t, "127.0.0.1", tcp)
	start := time.Now()
	if !closedWithin(silent, 5*time.Second) {
		t.Fatal("a silent connection stayed open 5s")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("a silent connection closed after %v, before FirstByteTimeout", d)
	}

	// A connection that sent a byte: open past FirstByteTimeout, closed
	// after IdleTimeout of silence.
	spoke := dialFrom(t, "127.0.0.1", tcp)
	if _, err := io.WriteString(spoke, "\x00"); err != nil {
		t.Fatal(err)
	}
	if closedWithin(spoke, 500*time.Millisecond) {
		t.Error("a connection that spoke was closed at FirstByteTimeout")
	}
	if !closedWithin(spoke, 5*time.Second) {
		t.Error("an idle connection stayed open 5s past IdleTimeout")
	}
	testkit.Eventually(t, 5*time.Second, "both silent connections closed and counted", func() bool {
		open, _, timedOut := s.Conns()
		return open == 0 && timedOut >= 2
	})
}
