package egress

import (
	"encoding/binary"
	"io"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// waitBuffered waits until the proxies of this process hold want bytes of
// copy buffers, and fails with what they hold if that does not happen.
func waitBuffered(t *testing.T, want int64, why string) {
	t.Helper()
	waitBufferedAtLeast(t, want, want, why)
}

// waitBufferedAtLeast waits until the copy buffers held are between least
// and most bytes and have stayed the same for 50 ms (a direction that moves
// up a size gives back one buffer before it takes the next), and returns
// what they hold then.
func waitBufferedAtLeast(t *testing.T, least, most int64, why string) int64 {
	t.Helper()
	got, since := int64(-1), time.Now()
	if !testkit.Poll(10*time.Second, func() bool {
		if now := lentBytes.Load(); now != got {
			got, since = now, time.Now()
		}
		return got >= least && got <= most && time.Since(since) >= 50*time.Millisecond
	}) {
		t.Fatalf("%s: %d bytes in copy buffers, want %d to %d", why, got, least, most)
	}
	return got
}

// A quiet tunnel holds no buffer; a download whose reader stops holds one
// buffer, grown past the small sizes, while the proxy's write waits;
// everything is given back.
func TestTunnelBuffers(t *testing.T) {
	h := start(t, nil)
	src := newSourceServer(t)
	h.resolver.set("bulk.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 443), src.Addr().String())
	waitBuffered(t, 0, "before the test")

	c, br := h.connect("bulk.example:443")
	defer c.Close()
	// Eight bytes up (a request for nothing), then quiet both ways.
	if err := binary.Write(c, binary.BigEndian, uint64(0)); err != nil {
		t.Fatal(err)
	}
	waitBuffered(t, 0, "quiet tunnel")
	if got := h.p.Stats().Buffered; got != 0 {
		t.Fatalf("Stats().Buffered = %d on a quiet tunnel", got)
	}

	// 64 MiB that the client does not read: the proxy grows its buffer
	// while reads fill it, until its write to the client blocks. How far
	// it grows depends on how much the sockets held by then (the largest
	// size is shown by BenchmarkConnect1GiB); it is past the smallest,
	// since the source writes 256 KiB at a time.
	const size = 64 << 20
	if err := binary.Write(c, binary.BigEndian, uint64(size)); err != nil {
		t.Fatal(err)
	}
	held := waitBufferedAtLeast(t, int64(bufferSizes[1]), int64(bufferSizes[len(bufferSizes)-1]), "stalled download")
	if !slices.Contains(bufferSizes[1:], int(held)) {
		t.Fatalf("a stalled download holds %d bytes, want one buffer of %v", held, bufferSizes[1:])
	}
	if got := h.p.Stats().Buffered; got != held {
		t.Fatalf("Stats().Buffered = %d during a stalled download, want %d", got, held)
	}
	t.Logf("a stalled download holds one buffer of %d bytes", held)

	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := io.CopyN(io.Discard, br, size); err != nil {
		t.Fatalf("download: %v after %d bytes", err, n)
	}
	waitBuffered(t, 0, "download read to its end")
	c.Close()
	waitBuffered(t, 0, "tunnel closed")
	if got := largeHeld.Load(); got != 0 {
		t.Errorf("%d bytes still counted against the large-buffer budget", got)
	}
}

// Large buffers stop at the budget: a direction then gets the largest class
// that fits, and giving buffers back frees the budget again.
func TestBufferBudget(t *testing.T) {
	waitBuffered(t, 0, "before the test")
	base := int64(largeBudget - 5<<20) // 5 MiB of the budget left
	largeHeld.Store(base)
	defer largeHeld.Store(0)

	type lent struct {
		b     *[]byte
		class int
	}
	var got []lent
	for _, want := range []int{3, 2, 1, 1} { // 4 MiB, then 1 MiB, then none left
		b, class := getBuffer(3)
		if class != want || len(*b) != bufferSizes[want] {
			t.Fatalf("getBuffer(3) with %d bytes of budget left: class %d (%d bytes), want %d",
				largeBudget-largeHeld.Load(), class, len(*b), want)
		}
		got = append(got, lent{b, class})
	}
	if held := largeHeld.Load(); held != largeBudget {
		t.Errorf("held %d, want the whole budget %d", held, largeBudget)
	}
	for _, l := range got {
		putBuffer(l.b, l.class)
	}
	if held := largeHeld.Load(); held != base {
		t.Errorf("held %d after giving everything back, want %d", held, base)
	}
	if n := lentBytes.Load(); n != 0 {
		t.Errorf("%d bytes still lent", n)
	}
}

func TestNextClass(t *testing.T) {
	for _, c := range []struct{ class, n, want int }{
		{0, 4 << 10, 1},    // filled: up
		{0, 4<<10 - 1, 0},  // not quite filled: stays
		{0, 0, 0},          // the smallest never goes down
		{1, 128 << 10, 2},  // filled: up
		{1, 32 << 10, 1},   // a quarter: stays
		{1, 32<<10 - 1, 0}, // under a quarter: down
		{2, 1 << 20, 3},    // filled: up
		{2, 768 << 10, 2},  // three quarters: stays
		{2, 0, 1},          // nothing: down
		{3, 4 << 20, 3},    // the largest stays
		{3, 1 << 20, 3},    // a quarter: stays
		{3, 1<<20 - 1, 2},  // under a quarter: down
	} {
		if got := nextClass(c.class, c.n); got != c.want {
			t.Errorf("nextClass(%d, %d) = %d, want %d", c.class, c.n, got, c.want)
		}
	}
}
