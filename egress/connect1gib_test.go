package egress

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// BenchmarkConnect1GiB is the throughput figure of issue 4: each iteration
// downloads 1 GiB through a CONNECT tunnel and 1 GiB over a direct loopback
// connection to the same server, alternating which goes first, and it
// reports MB/s each way and their ratio (proxy over direct; the target is
// at least 0.8), and the CPU time the process (client, server and proxy
// together) spent per GiB each way. The client reads into its own 256 KiB
// buffer both ways.
// An iteration takes seconds; run it once:
//
//	go test -run '^$' -bench Connect1GiB -benchtime 1x ./supervisor/egress/
//
// Latency added per proxied request (p50) is BenchmarkProxyVsDirect's
// p50-added-µs.
func BenchmarkConnect1GiB(b *testing.B) {
	const size = 1 << 30
	src := newSourceServer(b)
	h := start(b, nil)
	h.resolver.set("gib.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 443), src.Addr().String())

	dc, err := net.DialTimeout("tcp", src.Addr().String(), 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer dc.Close()
	tc, tbr := h.connect("gib.example:443")
	defer tc.Close()

	buf := make([]byte, 256<<10)
	var cpu time.Duration // of the last fetch
	fetch := func(c net.Conn, r io.Reader, n int) time.Duration {
		c.SetDeadline(time.Now().Add(2 * time.Minute))
		c0 := testkit.CPUTime()
		defer func() { cpu = testkit.CPUTime() - c0 }()
		t0 := time.Now()
		if err := binary.Write(c, binary.BigEndian, uint64(n)); err != nil {
			b.Fatal(err)
		}
		for left := n; left > 0; {
			k, err := r.Read(buf[:min(left, len(buf))])
			left -= k
			if err != nil && left > 0 {
				b.Fatalf("%d bytes short: %v", left, err)
			}
		}
		return time.Since(t0)
	}
	// Both connections open their windows before the clock starts.
	fetch(dc, dc, 64<<20)
	fetch(tc, tbr, 64<<20)

	var direct, proxied, directCPU, proxyCPU time.Duration
	fetchDirect := func() { direct += fetch(dc, dc, size); directCPU += cpu }
	fetchProxied := func() { proxied += fetch(tc, tbr, size); proxyCPU += cpu }
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			fetchDirect()
			fetchProxied()
		} else {
			fetchProxied()
			fetchDirect()
		}
	}
	b.StopTimer()
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/proxied.Seconds(), "proxy-MB/s")
	b.ReportMetric(direct.Seconds()/proxied.Seconds(), "ratio")
	b.ReportMetric(float64(directCPU.Milliseconds())/float64(b.N), "direct-cpu-ms/GiB")
	b.ReportMetric(float64(proxyCPU.Milliseconds())/float64(b.N), "proxy-cpu-ms/GiB")
}
