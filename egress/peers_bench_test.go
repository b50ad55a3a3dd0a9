package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// The egress proxy against the forward proxies people already run: Debian's
// squid and tinyproxy, each started here as a plain forward proxy on
// loopback with a configuration of its own (no cache, no logs), beside
// Berth's proxy and the direct transfer, all to the same source server.
//
// The source server and every client run in processes of their own (this
// test binary started again in a role, or curl), so the CPU this process
// spends while Berth's proxy carries a transfer is the proxy's alone, as
// /proc/PID/stat gives squid's and tinyproxy's. squid, tinyproxy and curl
// come from Debian (packaging/dev/bench-peers.sh installs them; make bench
// runs it). Run:
//
//	go test -run '^$' -bench EgressPeers -benchtime 3x ./egress/
//
// Sub-benchmarks, each alternating Berth and the other in every iteration:
//
//	connect-1GiB/vs=direct     curl downloads 1 GiB through a CONNECT tunnel
//	                           (berth-MB/s) and straight (direct-MB/s)
//	connect-1GiB/vs=squid      the same through Berth and through squid, with
//	connect-1GiB/vs=tinyproxy  MB/s and the proxy's CPU per GiB each way
//	small-get/vs=squid         1 KiB GETs over one kept-alive connection to
//	small-get/vs=tinyproxy     the proxy: the p50 each proxy adds to the
//	small-get/vs=relay         direct GET measured in the same iteration;
//	                           the relay is the floor of any proxy here: a
//	                           process that copies the connection's bytes to
//	                           the source and back, parsing nothing
//	concurrent-200/vs=squid    200 downloads of 8 MiB at once, each on its
//	                           own connection: total MB/s and the longest
//	                           wait for a byte any download saw
func BenchmarkEgressPeers(b *testing.B) {
	ps := startPeers(b)
	berth, direct, squid, tiny := ps.berth, ps.direct, ps.squid, ps.tiny

	const gib = 1 << 30
	for _, other := range []*peerProxy{direct, squid, tiny} {
		b.Run("connect-1GiB/vs="+other.name, func(b *testing.B) {
			var ours, theirs transfer
			for i := range b.N {
				inTurns(i, func(p *peerProxy) {
					t := curlDownload(b, p, gib)
					if p == berth {
						ours.add(t)
					} else {
						theirs.add(t)
					}
				}, berth, other)
			}
			b.ReportMetric(ours.mbps(), "berth-MB/s")
			if other == direct {
				b.ReportMetric(theirs.mbps(), "direct-MB/s")
				b.ReportMetric(ours.mbps()/theirs.mbps(), "ratio")
			} else {
				b.ReportMetric(theirs.mbps(), "base-MB/s")
				b.ReportMetric(ours.cpuPerGiB(), "berth-cpu-ms/GiB")
				b.ReportMetric(theirs.cpuPerGiB(), "base-cpu-ms/GiB")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
	for _, other := range []*peerProxy{squid, tiny, ps.relay} {
		b.Run("small-get/vs="+other.name, func(b *testing.B) {
			var d, ours, theirs []time.Duration
			for i := range b.N {
				inTurns(i, func(p *peerProxy) {
					r := runClient(b, p, clientSpec{Size: 1 << 10, Requests: 520, Concurrency: 1})
					// The first requests open the connection and warm it.
					got := r.Durations[20:]
					switch p {
					case direct:
						d = append(d, got...)
					case berth:
						ours = append(ours, got...)
					default:
						theirs = append(theirs, got...)
					}
				}, direct, berth, other)
			}
			base := median(d)
			b.ReportMetric(float64(median(ours)-base)/1e3, "berth-added-p50-µs")
			b.ReportMetric(float64(median(theirs)-base)/1e3, "base-added-p50-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("concurrent-200/vs=squid", func(b *testing.B) {
		var ours, theirs clientResult
		for i := range b.N {
			inTurns(i, func(p *peerProxy) {
				r := runClient(b, p, clientSpec{Size: 8 << 20, Requests: 200, Concurrency: 200})
				if p == berth {
					ours.merge(r)
				} else {
					theirs.merge(r)
				}
			}, berth, squid)
		}
		b.ReportMetric(ours.mbps(), "berth-total-MB/s")
		b.ReportMetric(theirs.mbps(), "base-total-MB/s")
		b.ReportMetric(float64(ours.MaxStall)/1e6, "berth-max-stall-ms")
		b.ReportMetric(float64(theirs.MaxStall)/1e6, "base-max-stall-ms")
		b.ReportMetric(0, "ns/op")
	})
}

// TestEgressPeersHarness runs the benchmark's machinery once, small: the
// source and client processes, squid and tinyproxy as started here, and
// Berth's proxy, each carrying a download of the right size, so that a peer
// that does not start or a proxy that changes its answer fails here and
// not in the middle of make bench.
func TestEgressPeersHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts squid and tinyproxy")
	}
	ps := startPeers(t)
	for _, p := range []*peerProxy{ps.direct, ps.berth, ps.squid, ps.tiny} {
		tr := curlDownload(t, p, 32<<20)
		if tr.bytes != 32<<20 || tr.wall <= 0 {
			t.Errorf("%s: curl moved %d bytes in %v", p.name, tr.bytes, tr.wall)
		}
		r := runClient(t, p, clientSpec{Size: 64 << 10, Requests: 8, Concurrency: 4})
		if r.Bytes != 8*64<<10 || len(r.Durations) != 8 {
			t.Errorf("%s: client moved %d bytes in %d requests", p.name, r.Bytes, len(r.Durations))
		}
	}
	// The relay carries plain GETs (a CONNECT would reach the source
	// itself, which serves none).
	if r := runClient(t, ps.relay, clientSpec{Size: 64 << 10, Requests: 8, Concurrency: 1}); r.Bytes != 8*64<<10 {
		t.Errorf("relay: client moved %d bytes", r.Bytes)
	}
	// The proxy still refuses a computer without its password: the route
	// the benchmark uses is the real one, not an open door.
	bad := &peerProxy{name: "berth, wrong password", proxy: "http://" + url.UserPassword(computer, "wrong").String() + "@" + ps.h.addr, host: "peer.example"}
	if _, err := curl(t, bad, 1<<10); err == nil || !strings.Contains(err.Error(), "407") {
		t.Errorf("a wrong password: %v, want a 407", err)
	}
}

// peers are the source server and the ways to it the benchmark compares.
type peers struct {
	h                          *harness // Berth's proxy
	direct, berth, squid, tiny *peerProxy
	// relay copies bytes to the source and back, parsing nothing: the
	// least any proxy process can add.
	relay *peerProxy
}

// startPeers starts the source process, Berth's proxy (which reaches the
// source as peer.example, ports 80 and 443), squid and tinyproxy.
func startPeers(tb testing.TB) *peers {
	tb.Helper()
	for _, bin := range []string{"squid", "tinyproxy", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("%s is not installed: run packaging/dev/bench-peers.sh (apt-get install squid tinyproxy curl)", bin)
		}
	}
	src := startRole(tb, "source")
	// The proxy logs each connection to a file, as a supervisor writes
	// its log.
	log, err := os.Create(filepath.Join(tb.TempDir(), "egress.log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { log.Close() })
	h := start(tb, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(log, nil)) })
	h.resolver.set("peer.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 80), src)
	h.dialer.route(ap(publicA, 443), src)
	ps := &peers{
		h:      h,
		direct: &peerProxy{name: "direct", host: src},
		berth: &peerProxy{
			name:  "berth",
			proxy: "http://" + url.UserPassword(computer, h.password).String() + "@" + h.addr,
			host:  "peer.example",
			cpu:   testkit.CPUTime,
		},
		squid: startSquid(tb),
		tiny:  startTinyproxy(tb),
	}
	ps.relay = &peerProxy{name: "relay", proxy: "http://" + startRole(tb, "relay", peerUpstreamEnv+"="+src), host: src}
	ps.squid.host, ps.tiny.host = src, src
	return ps
}

// inTurns calls fn with each of ways in order, or in reverse order on odd
// rounds, so that none always goes first.
func inTurns(round int, fn func(*peerProxy), ways ...*peerProxy) {
	order := slices.Clone(ways)
	if round%2 == 1 {
		slices.Reverse(order)
	}
	for _, p := range order {
		fn(p)
	}
}

// peerProxy is one way to the source: straight (proxy ""), or through a
// forward proxy. host is the source as that proxy is asked for it.
type peerProxy struct {
	name  string
	proxy string
	host  string
	// cpu is the CPU time the proxy has used so far; nil for none.
	cpu func() time.Duration
}

func (p *peerProxy) url(path string) string {
	return "http://" + p.host + path
}

// transfer sums downloads: their bytes, wall time and the proxy's CPU.
type transfer struct {
	bytes     int64
	wall, cpu time.Duration
}

func (t *transfer) add(o transfer) {
	t.bytes += o.bytes
	t.wall += o.wall
	t.cpu += o.cpu
}

func (t transfer) mbps() float64 { return float64(t.bytes) / t.wall.Seconds() / 1e6 }

func (t transfer) cpuPerGiB() float64 {
	return float64(t.cpu.Milliseconds()) / (float64(t.bytes) / (1 << 30))
}

// curlDownload has curl fetch size bytes through p, through a CONNECT
// tunnel when p is a proxy.
func curlDownload(tb testing.TB, p *peerProxy, size int64) transfer {
	tb.Helper()
	t, err := curl(tb, p, size)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func curl(tb testing.TB, p *peerProxy, size int64) (transfer, error) {
	// Port 443 on the source is the same server: curl tunnels plain
	// HTTP through the CONNECT, which is what the proxy sees of TLS.
	host := p.host
	if p.proxy != "" && p.host == "peer.example" {
		host = "peer.example:443"
	}
	args := []string{"-sS", "-o", "/dev/null", "--max-time", "120", "--noproxy", "",
		"-w", "%{http_code} %{size_download}", "http://" + host + "/bytes/" + strconv.FormatInt(size, 10)}
	if p.proxy != "" {
		args = append(args, "-p", "-x", p.proxy)
	}
	cmd := exec.Command("curl", args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	var c0 time.Duration
	if p.cpu != nil {
		c0 = p.cpu()
	}
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	var cpu time.Duration
	if p.cpu != nil {
		cpu = p.cpu() - c0
	}
	var code string
	var n int64
	fmt.Sscan(out.String(), &code, &n)
	if err != nil || code != "200" || n != size {
		return transfer{}, fmt.Errorf("curl through %s: HTTP %s, %d of %d bytes, %v: %s", p.name, code, n, size, err, strings.TrimSpace(errb.String()))
	}
	return transfer{bytes: n, wall: wall, cpu: cpu}, nil
}

// clientSpec is what a client process does: Requests GETs of Size bytes
// through Proxy, Concurrency at a time, each worker on one kept-alive
// connection.
type clientSpec struct {
	Proxy       string
	URL         string
	Size        int
	Requests    int
	Concurrency int
}

// clientResult is what it saw.
type clientResult struct {
	Durations []time.Duration
	Bytes     int64
	Wall      time.Duration
	// MaxStall is the longest wait for the next bytes of a body.
	MaxStall time.Duration
	Error    string
}

func (r *clientResult) merge(o clientResult) {
	r.Durations = append(r.Durations, o.Durations...)
	r.Bytes += o.Bytes
	r.Wall += o.Wall
	r.MaxStall = max(r.MaxStall, o.MaxStall)
}

func (r clientResult) mbps() float64 { return float64(r.Bytes) / r.Wall.Seconds() / 1e6 }

// runClient runs spec in a client process against p.
func runClient(tb testing.TB, p *peerProxy, spec clientSpec) clientResult {
	tb.Helper()
	spec.Proxy = p.proxy
	spec.URL = p.url("/bytes/" + strconv.Itoa(spec.Size))
	js, _ := json.Marshal(spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerRoleEnv+"=client", peerSpecEnv+"="+string(js))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	var r clientResult
	if err == nil {
		err = json.Unmarshal(out, &r)
	}
	if err == nil && r.Error != "" {
		err = errors.New(r.Error)
	}
	if err != nil {
		tb.Fatalf("client through %s: %v %s", p.name, err, errb.String())
	}
	return r
}

const (
	peerRoleEnv = "BERTH_EGRESS_BENCH_ROLE"
	peerSpecEnv = "BERTH_EGRESS_BENCH_SPEC"
	// peerUpstreamEnv is the relay's source address.
	peerUpstreamEnv = "BERTH_EGRESS_BENCH_UPSTREAM"
)

// runPeerRole runs this test binary as the source, the relay or a client
// process.
func runPeerRole(role string) int {
	switch role {
	case "source":
		return runSource()
	case "relay":
		return runRelay(os.Getenv(peerUpstreamEnv))
	case "client":
		var spec clientSpec
		if err := json.Unmarshal([]byte(os.Getenv(peerSpecEnv)), &spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		json.NewEncoder(os.Stdout).Encode(runClientSpec(spec))
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 2
}

// runSource serves GET /bytes/N (N bytes) on loopback, prints its address
// and serves until its standard input closes.
func runSource() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	block := bytes.Repeat([]byte("berth-egress-bench\n"), (256<<10)/19+1)[:256<<10]
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64)
		if err != nil || n < 0 || n > 8<<30 {
			http.Error(w, "GET /bytes/N, N at most 8 GiB", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		for n > 0 {
			k, err := w.Write(block[:min(n, int64(len(block)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	fmt.Println(ln.Addr().String())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		srv.Close()
	}()
	srv.Serve(ln)
	return 0
}

// runRelay accepts connections on loopback, prints its address, and copies
// each connection's bytes to upstream and back until its standard input
// closes. A forward proxy's request line names the source, which serves it
// as it would a direct one.
func runRelay(upstream string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		go func() {
			defer c.Close()
			u, err := net.DialTimeout("tcp", upstream, 5*time.Second)
			if err != nil {
				return
			}
			defer u.Close()
			go func() {
				io.Copy(u, c)
				u.(*net.TCPConn).CloseWrite()
			}()
			io.Copy(c, u)
		}()
	}
}

func runClientSpec(spec clientSpec) clientResult {
	tr := &http.Transport{
		MaxIdleConnsPerHost: spec.Concurrency,
		MaxConnsPerHost:     spec.Concurrency,
		DisableCompression:  true,
	}
	if spec.Proxy != "" {
		u, err := url.Parse(spec.Proxy)
		if err != nil {
			return clientResult{Error: err.Error()}
		}
		tr.Proxy = http.ProxyURL(u)
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := &http.Client{Transport: tr}
	var (
		mu  sync.Mutex
		res clientResult
		wg  sync.WaitGroup
	)
	res.Durations = make([]time.Duration, 0, spec.Requests)
	jobs := make(chan struct{}, spec.Requests)
	for range spec.Requests {
		jobs <- struct{}{}
	}
	close(jobs)
	get := func(buf []byte) (time.Duration, int64, time.Duration, error) {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, spec.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, 0, 0, fmt.Errorf("%s", resp.Status)
		}
		var n int64
		var stall time.Duration
		last := time.Now()
		for {
			k, err := resp.Body.Read(buf)
			now := time.Now()
			stall = max(stall, now.Sub(last))
			last = now
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, n, stall, err
			}
		}
		if n != int64(spec.Size) {
			return 0, n, stall, fmt.Errorf("%d of %d bytes", n, spec.Size)
		}
		return time.Since(t0), n, stall, nil
	}
	t0 := time.Now()
	for range spec.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for range jobs {
				d, n, stall, err := get(buf)
				mu.Lock()
				res.Bytes += n
				res.MaxStall = max(res.MaxStall, stall)
				if err != nil && res.Error == "" {
					res.Error = err.Error()
				}
				if err == nil {
					res.Durations = append(res.Durations, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Wall = time.Since(t0)
	return res
}

// startRole starts this test binary in role, with env added to its
// environment, and returns the address it prints; the process ends when
// the test does.
func startRole(tb testing.TB, role string, env ...string) string {
	tb.Helper()
	addr, _ := testkit.StartRole(tb, append([]string{peerRoleEnv + "=" + role}, env...)...)
	return addr
}

// startSquid runs squid in the foreground as a plain forward proxy on a
// loopback port: no cache, no logs, every request allowed.
func startSquid(tb testing.TB) *peerProxy {
	dir, port := peerDir(tb), freePort(tb)
	conf := fmt.Sprintf(`http_port 127.0.0.1:%d
pid_filename %[2]s/squid.pid
cache_log %[2]s/cache.log
coredump_dir %[2]s
access_log none
cache_store_log none
cache deny all
cache_mem 0 MB
http_access allow all
icp_port 0
htcp_port 0
netdb_filename none
via off
forwarded_for delete
shutdown_lifetime 0 seconds
max_filedescriptors 4096
`, port, dir)
	return startPeer(tb, "squid", dir, port, conf, func(c string) []string { return []string{"-N", "-f", c} })
}

// startTinyproxy runs tinyproxy in the foreground the same way.
func startTinyproxy(tb testing.TB) *peerProxy {
	dir, port := peerDir(tb), freePort(tb)
	conf := fmt.Sprintf(`Port %d
Listen 127.0.0.1
Timeout 600
MaxClients 1024
PidFile "%[2]s/tinyproxy.pid"
LogFile "%[2]s/tinyproxy.log"
LogLevel Error
Allow 127.0.0.1
DisableViaHeader Yes
`, port, dir)
	return startPeer(tb, "tinyproxy", dir, port, conf, func(c string) []string { return []string{"-d", "-c", c} })
}

func startPeer(tb testing.TB, name, dir string, port int, conf string, args func(conf string) []string) *peerProxy {
	tb.Helper()
	path := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(name, args(path)...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = asNobody()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			tb.Fatalf("%s ended: %v\n%s", name, waitErr, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s is not listening on %s after 20 s\n%s", name, addr, logs.String())
		}
	}
	pid := cmd.Process.Pid
	return &peerProxy{name: name, proxy: "http://" + addr, cpu: func() time.Duration { return testkit.ProcessCPUTime(pid) }}
}

// peerDir is a folder the proxies can write as the user they run as (the
// test's own temporary folder is closed to other users).
func peerDir(tb testing.TB) string {
	dir, err := os.MkdirTemp("", "berth-egress-peer-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, nobodyID, nobodyID); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

const nobodyID = 65534

// asNobody runs a peer as nobody when this process is root, as it would
// run as its own unprivileged user when installed.
func asNobody() *syscall.SysProcAttr {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID}}
}

func freePort(tb testing.TB) int {
	p, err := testkit.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
