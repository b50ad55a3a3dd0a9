package egress

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkProxyVsDirect compares GETs through the proxy with GETs straight
// to the same loopback server, alternating the two in one run. Both keep
// their connections alive. It reports the mean time per request each way
// (direct-ns/op, proxy-ns/op, ratio), the medians and the median added
// latency (p50-added-µs), and for large bodies the throughput each way.
func BenchmarkProxyVsDirect(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		b.Run("body="+byteSize(size), func(b *testing.B) {
			h := start(b, nil)
			body := strings.Repeat("x", size)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(size))
				io.WriteString(w, body)
			}))
			defer up.Close()
			h.resolver.set("bench.example", []netip.Addr{publicA})
			h.dialer.route(ap(publicA, 80), up.Listener.Addr().String())

			direct := &http.Client{Transport: &http.Transport{}}
			defer direct.CloseIdleConnections()
			proxied := h.client(nil)
			get := func(c *http.Client, url string) time.Duration {
				t0 := time.Now()
				resp, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != int64(size) || resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d bytes, %v", resp.Status, n, err)
				}
				return time.Since(t0)
			}
			directURL, proxyURL := up.URL+"/", "http://bench.example/"
			for range 10 {
				get(direct, directURL)
				get(proxied, proxyURL)
			}
			dd := make([]time.Duration, 0, b.N)
			pd := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				dd = append(dd, get(direct, directURL))
				pd = append(pd, get(proxied, proxyURL))
			}
			b.StopTimer()
			dMean, pMean := mean(dd), mean(pd)
			b.ReportMetric(float64(dMean.Nanoseconds()), "direct-ns/op")
			b.ReportMetric(float64(pMean.Nanoseconds()), "proxy-ns/op")
			b.ReportMetric(float64(pMean)/float64(dMean), "ratio")
			dP50, pP50 := median(dd), median(pd)
			b.ReportMetric(float64(pP50-dP50)/float64(time.Microsecond), "p50-added-µs")
			if size >= 1<<20 {
				b.ReportMetric(float64(size)/dMean.Seconds()/1e6, "direct-MB/s")
				b.ReportMetric(float64(size)/pMean.Seconds()/1e6, "proxy-MB/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkConnectThroughput compares a download through a CONNECT tunnel
// with the same download over a direct loopback connection, alternating
// the two in one run, and reports MB/s each way and their ratio.
func BenchmarkConnectThroughput(b *testing.B) {
	const chunk = 16 << 20
	src := newSourceServer(b)
	h := start(b, nil)
	h.resolver.set("bulk.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 443), src.Addr().String())

	dc, err := net.Dial("tcp", src.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer dc.Close()
	tc, tbr := h.connect("bulk.example:443")
	defer tc.Close()
	tc.SetDeadline(time.Time{})
	buf := make([]byte, 256<<10)
	fetch := func(c net.Conn, r io.Reader) time.Duration {
		t0 := time.Now()
		if err := binary.Write(c, binary.BigEndian, uint64(chunk)); err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(r, chunk), buf); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	fetch(dc, dc)
	fetch(tc, tbr)
	var dt, pt time.Duration
	b.SetBytes(chunk)
	b.ResetTimer()
	for range b.N {
		dt += fetch(dc, dc)
		pt += fetch(tc, tbr)
	}
	b.StopTimer()
	total := float64(chunk) * float64(b.N) / 1e6
	b.ReportMetric(total/dt.Seconds(), "direct-MB/s")
	b.ReportMetric(total/pt.Seconds(), "proxy-MB/s")
	b.ReportMetric(dt.Seconds()/pt.Seconds(), "ratio")
}

// BenchmarkIdleTunnels holds 1,000 idle tunnels open at once and reports
// the memory the proxy spends on each (heap and stacks, less the same
// number of direct connections to the same server), then times round
// trips over one of them.
func BenchmarkIdleTunnels(b *testing.B) {
	const n = 1000
	echo := newEchoServer(b)
	// One computer holds them all: past its default bound.
	h := start(b, func(c *Config) { c.MaxTunnelsPerComputer = n })
	h.resolver.set("idle.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 443), echo.addr())

	direct := heapAndStacks()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", echo.addr())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	direct = heapAndStacks() - direct
	for _, c := range conns {
		c.Close()
	}

	tunnels := heapAndStacks()
	var last net.Conn
	var lastBR *bufio.Reader
	for range n {
		last, lastBR = h.connect("idle.example:443")
	}
	tunnels = heapAndStacks() - tunnels
	if got := h.p.Stats().Active; got < n {
		b.Fatalf("%d tunnels open, want %d", got, n)
	}

	last.SetDeadline(time.Time{})
	msg := []byte("ping")
	buf := make([]byte, len(msg))
	b.ResetTimer()
	for range b.N {
		if _, err := last.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(lastBR, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tunnels-direct)/n, "proxy-B/idle-tunnel")
}

func heapAndStacks() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// newSourceServer serves, on each connection, as many bytes as each
// 8-byte big-endian request asks for.
func newSourceServer(b testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() {
				block := make([]byte, 256<<10)
				r := bufio.NewReader(c)
				for {
					var n uint64
					if err := binary.Read(r, binary.BigEndian, &n); err != nil {
						return
					}
					for n > 0 {
						k := min(n, uint64(len(block)))
						if _, err := c.Write(block[:k]); err != nil {
							return
						}
						n -= k
					}
				}
			}()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
