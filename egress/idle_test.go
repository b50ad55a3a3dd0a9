package egress

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
)

var idleLine = regexp.MustCompile(`up=(\d+) down=(\d+) .*closed=idle`)

// A slow reader keeps a tunnel busy for several idle timeouts. The write
// toward the client is blocked on its buffer all along, so only the
// kernel's byte counters show that bytes move. Once the reader stops, the
// tunnel closes as idle, and its log line counts exactly the bytes each
// side got.
func TestIdleTimeoutWhileWriteBlocked(t *testing.T) {
	fake := clock.NewFake(epoch)
	const idle = time.Minute
	h := start(t, func(c *Config) {
		c.Clock = fake
		c.IdleTimeout = idle
	})
	src := newSourceServer(t)
	h.resolver.set("bulk.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 443), src.Addr().String())
	c, br := h.connect("bulk.example:443")
	if err := c.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	// 64 MiB is far more than the sockets on the way buffer, so the
	// source keeps the proxy's write full while the client reads slowly.
	if err := binary.Write(c, binary.BigEndian, uint64(64<<20)); err != nil {
		t.Fatal(err)
	}
	closedIdle := func() []string { return idleLine.FindStringSubmatch(h.logs.String()) }

	buf := make([]byte, 256<<10)
	got := 0
	for i := range 8 { // four idle timeouts of slow reading
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadFull(br, buf)
		got += n
		if err != nil {
			if closedIdle() != nil {
				t.Fatalf("closed as idle while the client was reading (read %d, %d bytes)", i, got)
			}
			t.Fatalf("read %d: %v after %d bytes", i, err, got)
		}
		fake.Advance(idle / 2)
		if closedIdle() != nil {
			t.Fatalf("closed as idle after %v of slow reading", time.Duration(i+1)*idle/2)
		}
	}

	// The reader stops: a full timeout later the tunnel is closed.
	ctx := testContext(t)
	var m []string
	testkit.EventuallyContext(t, ctx, "the tunnel closed as idle", func() bool {
		if m = closedIdle(); m != nil {
			return true
		}
		fake.Advance(idle / 4)
		return false
	})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		n, err := br.Read(buf)
		got += n
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("drain: %v after %d bytes", err, got)
		}
	}
	up, _ := strconv.Atoi(m[1])
	down, _ := strconv.Atoi(m[2])
	if up != 8 || down != got {
		t.Errorf("logged up=%d down=%d; the source got 8 bytes and the client %d", up, down, got)
	}
	if got >= 64<<20 {
		t.Errorf("the client got all %d bytes: the proxy's write was never held up", got)
	}
}
