package relayserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

const blobSize = 100 << 20

func benchHandler() http.Handler {
	chunk := make([]byte, 256<<10)
	mux := http.NewServeMux()
	mux.Handle("/small", echoHandler("bench"))
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(blobSize))
		for left := blobSize; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
	})
	return mux
}

// benchPair returns a client through the relay and a client straight to the
// same handler over loopback.
func benchPair(b *testing.B) (relayed, direct *http.Client, directURL string) {
	ctx := testCtx(b, time.Minute)
	h := benchHandler()
	r := startRelay(b, "127.0.0.1:0", relayserver.Config{})
	startAgent(b, relayclient.Config{URL: r.url, Token: "good-token-1", Handler: h})
	testkit.EventuallyContext(b, ctx, "agent online", online(r, "agent-1"))
	ds := httptest.NewServer(h)
	b.Cleanup(ds.Close)
	dt := &http.Transport{}
	b.Cleanup(dt.CloseIdleConnections)
	return &http.Client{Transport: r.Transport("agent-1")}, &http.Client{Transport: dt}, ds.URL
}

func fetch(b *testing.B, c *http.Client, url string) int64 {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return n
}

func timed(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

// BenchmarkRoundTrip: a small request through the relay against the same
// request straight to the handler, interleaved, alternating which goes
// first.
func BenchmarkRoundTrip(b *testing.B) {
	relayed, direct, durl := benchPair(b)
	fetch(b, relayed, "http://agent/small")
	fetch(b, direct, durl+"/small")
	var tr, td time.Duration
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so that neither gains from the
		// other's warm caches.
		if i%2 == 0 {
			tr += timed(func() { fetch(b, relayed, "http://agent/small") })
			td += timed(func() { fetch(b, direct, durl+"/small") })
		} else {
			td += timed(func() { fetch(b, direct, durl+"/small") })
			tr += timed(func() { fetch(b, relayed, "http://agent/small") })
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tr.Microseconds())/n, "relay-µs/req")
	b.ReportMetric(float64(td.Microseconds())/n, "direct-µs/req")
	b.ReportMetric(float64(tr)/float64(td), "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDownload100MB: a 100 MB response through the relay against
// straight to the handler, alternating which goes first.
func BenchmarkDownload100MB(b *testing.B) {
	relayed, direct, durl := benchPair(b)
	var tr, td time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			tr += timed(func() { fetch(b, relayed, "http://agent/blob") })
			td += timed(func() { fetch(b, direct, durl+"/blob") })
		} else {
			td += timed(func() { fetch(b, direct, durl+"/blob") })
			tr += timed(func() { fetch(b, relayed, "http://agent/blob") })
		}
	}
	mb := float64(b.N) * blobSize / 1e6
	rr, dr := mb/tr.Seconds(), mb/td.Seconds()
	b.ReportMetric(rr, "relay-MB/s")
	b.ReportMetric(dr, "direct-MB/s")
	b.ReportMetric(rr/dr, "ratio")
	b.ReportMetric(0, "ns/op")
}

// The idle-memory benchmark runs its agents in a child process (this test
// binary re-executed), so the heap measured here is the relay's alone.
const (
	helperEnv     = "BERTH_RELAY_BENCH_AGENTS_URL"
	helperModeEnv = "BERTH_RELAY_BENCH_AGENTS_MODE"
	helperN       = 500
)

// runHelperAgents connects helperN agents (relay mode) or bare websockets
// (ws mode), prints "ready", and holds them until stdin closes.
func runHelperAgents() int {
	url, mode := os.Getenv(helperEnv), os.Getenv(helperModeEnv)
	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{}}
	var closers []io.Closer
	for i := range helperN {
		if mode == "ws" {
			c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			closers = append(closers, websocket.NetConn(ctx, c, websocket.MessageBinary))
			continue
		}
		s, err := relayclient.Connect(ctx, relayclient.Config{URL: url, Token: fmt.Sprintf("sim--sim-%03d", i), HTTPClient: hc})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		closers = append(closers, s)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range closers {
		c.Close()
	}
	return 0
}

func memNow() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// measureIdle returns the relay process's heap and stack growth per
// connection while the child holds helperN idle connections.
func measureIdle(b *testing.B, url, mode string, ready func() bool) (heapPer, stackPer float64) {
	ctx := testCtx(b, time.Minute)
	h0, s0 := memNow()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+url, helperModeEnv+"="+mode)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		b.Fatalf("helper: %q, %v", line, err)
	}
	testkit.EventuallyContext(b, ctx, "connections registered", ready)
	h1, s1 := memNow()
	return (float64(h1) - float64(h0)) / helperN, (float64(s1) - float64(s0)) / helperN
}

// BenchmarkIdleAgentMemory: heap and goroutine stack held by the relay per
// idle agent connection, against an idle bare websocket connection held
// by a plain handler (the floor for any websocket relay).
func BenchmarkIdleAgentMemory(b *testing.B) {
	var heapR, stackR, heapW, stackW float64
	for range b.N {
		r := startRelay(b, "127.0.0.1:0", relayserver.Config{})
		heapR, stackR = measureIdle(b, r.url, "relay", func() bool { return r.Online() == helperN })
		r.stop()

		held := make(chan struct{}, helperN)
		ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			c, err := websocket.Accept(w, req, nil)
			if err != nil {
				return
			}
			nc := websocket.NetConn(req.Context(), c, websocket.MessageBinary)
			held <- struct{}{}
			io.Copy(io.Discard, nc)
			nc.Close()
		}))
		heapW, stackW = measureIdle(b, ws.URL, "ws", func() bool { return len(held) == helperN })
		ws.CloseClientConnections()
		ws.Close()
	}
	b.ReportMetric(heapR, "relay-heap-B/agent")
	b.ReportMetric(heapR+stackR, "relay-total-B/agent")
	b.ReportMetric(heapW+stackW, "bare-ws-total-B/conn")
	b.ReportMetric((heapR+stackR)/(heapW+stackW), "ratio")
	b.ReportMetric(0, "ns/op")
}
