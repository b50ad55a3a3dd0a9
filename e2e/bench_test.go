package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/supervisor/daemon"
)

// The benchmarks report our figure, a baseline measured in the same run on
// the same engine and image, and the median of the paired ratios:
//
//	make bench    (or: go test ./e2e -run '^$' -bench . -benchtime 20x)

func median[T time.Duration | float64](xs []T) T { return testkit.Median(xs) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func dockerClient(b testing.TB) *client.Client {
	b.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// bareStart is the baseline of a cold start: docker create + start of the
// same image, no hardening, the default network.
func bareStart(b *testing.B, ctx context.Context, cli *client.Client, image string) time.Duration {
	b.Helper()
	start := time.Now()
	ready, err := startBare(ctx, cli, image, fmt.Sprintf("berth-bench-bare-%d", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	return ready.Sub(start)
}

// startBare creates and starts a container of image named name, with
// nothing of Berth's, and returns when the engine has started it; the
// container is removed before it returns. It may run concurrently.
func startBare(ctx context.Context, cli *client.Client, image, name string) (ready time.Time, err error) {
	defer cli.ContainerRemove(context.WithoutCancel(ctx), name, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Image: image}); err != nil {
		return ready, fmt.Errorf("bare create: %w", err)
	}
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		return ready, fmt.Errorf("bare start: %w", err)
	}
	return time.Now(), nil
}

// BenchmarkColdStart times a REST start until the first exec is answered,
// against a bare docker create + start of the same image.
func BenchmarkColdStart(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "bench")
	cli := dockerClient(b)
	timeOurs := func() time.Duration {
		start := time.Now()
		s.must("POST", "/v1/agents/bench/computer/start", nil, 200, nil)
		if x := s.exec("bench", "echo hi"); x.Stdout != "hi\n" {
			b.Fatalf("first exec: %+v", x)
		}
		d := time.Since(start)
		s.must("POST", "/v1/agents/bench/computer/stop", nil, 200, nil)
		return d
	}
	pairedRuns(b, "start-to-exec-ms", timeOurs, "bare-create+start-ms", func() time.Duration {
		return bareStart(b, ctx, cli, "berth/test:latest")
	})
}

// pairedRuns times ours and base alternately, the first of each pair
// swapping every loop, and reports both medians and the median ratio.
func pairedRuns(b *testing.B, oursUnit string, ours func() time.Duration, baseUnit string, base func() time.Duration) {
	o, r := testkit.PairedRuns(b, ours, base)
	b.ReportMetric(ms(median(o)), oursUnit)
	b.ReportMetric(ms(median(r)), baseUnit)
	b.ReportMetric(testkit.PairRatio(o, r), "ratio")
}

// BenchmarkExec times an `echo hi` through the REST API against the same
// command through the Docker API's exec (what `docker exec` does).
func BenchmarkExec(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "bench")
	var sess session
	s.must("POST", "/v1/agents/bench/computer/start", nil, 200, &sess)
	defer s.call("POST", "/v1/agents/bench/computer/stop", nil, nil)
	name := "berth-c-" + strings.TrimPrefix(sess.ID, "s_")
	cli := dockerClient(b)
	dockerExec := func() time.Duration {
		start := time.Now()
		ex, err := cli.ExecCreate(ctx, name, client.ExecCreateOptions{Cmd: []string{"echo", "hi"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 64)
		for {
			if _, err := att.Reader.Read(buf); err != nil {
				break
			}
		}
		att.Close()
		if ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{}); err != nil || ins.ExitCode != 0 {
			b.Fatalf("docker exec: %v %+v", err, ins)
		}
		return time.Since(start)
	}
	restExec := func() time.Duration {
		start := time.Now()
		if x := s.exec("bench", "echo hi"); x.Stdout != "hi\n" {
			b.Fatalf("exec: %+v", x)
		}
		return time.Since(start)
	}
	restExec() // warm the connection
	pairedRuns(b, "rest-exec-ms", restExec, "docker-exec-ms", dockerExec)

	// computerd's idle memory, read from the host's view of its process.
	ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second)
	if kb := vmRSS(ins.Container.State.Pid); kb > 0 {
		b.ReportMetric(float64(kb)/1024, "computerd-rss-MB")
	}
}

func vmRSS(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// startToExec times a REST start of agent until its first exec answers.
func startToExec(b *testing.B, s *super, agent string) time.Duration {
	b.Helper()
	start := time.Now()
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
	if x := s.exec(agent, "echo hi"); x.Stdout != "hi\n" {
		b.Fatalf("first exec: %+v", x)
	}
	return time.Since(start)
}

// BenchmarkWarmStart times a REST start served by the warm pool until the
// first exec is answered, against a bare docker create + start of the same
// image. Between starts (untimed) the session stops and the pool refills.
// Its target is a p50 at most 40 ms over 50 starts:
//
//	go test ./e2e -run '^$' -bench WarmStart -benchtime 50x
func BenchmarkWarmStart(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const size = 2
	s := startPoolBench(b, "berth/test:latest", size)
	connect(s, "warm")
	cli := dockerClient(b)
	refilled := func() {
		testkit.Eventually(b, 2*time.Minute, "the warm pool refilled", func() bool { return s.d.Service.PoolStats().Waiting >= size })
	}
	claimed := s.d.Service.PoolStats().Claimed
	var runs int64
	warm := func() time.Duration {
		refilled()
		d := startToExec(b, s, "warm")
		runs++
		s.must("POST", "/v1/agents/warm/computer/stop", nil, 200, nil)
		return d
	}
	pairedRuns(b, "warm-start-to-exec-ms", warm, "bare-create+start-ms", func() time.Duration {
		return bareStart(b, ctx, cli, "berth/test:latest")
	})
	if got := s.d.Service.PoolStats().Claimed - claimed; got != runs {
		b.Fatalf("%d of %d starts came from the pool", got, runs)
	}
}

// startPoolBench is startPoolSupervisor for benchmarks.
func startPoolBench(b *testing.B, image string, size int) *super {
	b.Helper()
	s, _ := serveDaemon(b, daemon.Options{
		Egress: daemon.EgressOptions{Listen: ":0"},
		Logger: slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, map[string]string{
		"COMPUTER_IMAGE_HEADLESS": image, "COMPUTER_MEMORY_MB": "512", "COMPUTER_NETWORK_POOL": "1",
		"WARM_POOL_SIZE": strconv.Itoa(size),
	})
	return s
}

// BenchmarkExecMCP times an `echo hi` through `berth mcp` (stdio, as an
// agent's MCP client runs it) against the same command through the Docker
// API's exec.
func BenchmarkExecMCP(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "benchmcp")
	var sess session
	s.must("POST", "/v1/agents/benchmcp/computer/start", nil, 200, &sess)
	defer s.call("POST", "/v1/agents/benchmcp/computer/stop", nil, nil)
	name := "berth-c-" + strings.TrimPrefix(sess.ID, "s_")
	cmd := exec.Command(berthBin, "mcp", "--agent", "benchmcp")
	cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	cli := dockerClient(b)
	mcpExec := func() time.Duration {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_exec", Arguments: map[string]any{"command": "echo hi"}})
		if err != nil || res.IsError {
			b.Fatalf("MCP exec: %v %+v", err, res)
		}
		return time.Since(start)
	}
	mcpExec() // warm the connections
	pairedRuns(b, "mcp-exec-ms", mcpExec, "docker-exec-ms", func() time.Duration { return dockerExec(b, ctx, cli, name) })
}

// dockerExec times `echo hi` through the Docker API's exec.
func dockerExec(b *testing.B, ctx context.Context, cli *client.Client, name string) time.Duration {
	b.Helper()
	start := time.Now()
	ex, err := cli.ExecCreate(ctx, name, client.ExecCreateOptions{Cmd: []string{"echo", "hi"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatal(err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, att.Reader)
	att.Close()
	if ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{}); err != nil || ins.ExitCode != 0 {
		b.Fatalf("docker exec: %v %+v", err, ins)
	}
	return time.Since(start)
}

// tarOf is a tar archive holding one file.
func tarOf(name, content string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Uid: 1000, Gid: 1000})
	tw.Write([]byte(content))
	tw.Close()
	return buf.Bytes()
}

// BenchmarkFiles times write_file (16,000 characters, the tool's limit)
// and read_file (24,000) through the REST API, verified answers included,
// against copying the same bytes with the Docker API (what `docker cp`
// does). Figures are throughput in MB/s.
func BenchmarkFiles(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "benchfiles")
	var sess session
	s.must("POST", "/v1/agents/benchfiles/computer/start", nil, 200, &sess)
	defer s.call("POST", "/v1/agents/benchfiles/computer/stop", nil, nil)
	name := "berth-c-" + strings.TrimPrefix(sess.ID, "s_")
	cli := dockerClient(b)
	small, big := strings.Repeat("0123456789abcdef", 1000), strings.Repeat("a", 24000)
	if x := s.exec("benchfiles", "head -c 24000 /dev/zero | tr '\\0' a > big.txt && wc -c < big.txt"); strings.TrimSpace(x.Stdout) != "24000" {
		b.Fatalf("make the file to read: %+v", x)
	}
	for _, tc := range []struct {
		name  string
		bytes int
		ours  func()
		base  func()
	}{
		{"write", len(small), func() {
			var w struct {
				Bytes int `json:"bytes"`
			}
			s.must("POST", "/v1/agents/benchfiles/computer/write_file", map[string]any{"path": "w.txt", "content": small}, 200, &w)
			if w.Bytes != len(small) {
				b.Fatalf("write_file wrote %d bytes", w.Bytes)
			}
		}, func() {
			if _, err := cli.CopyToContainer(ctx, name, client.CopyToContainerOptions{DestinationPath: "/home/berth", Content: bytes.NewReader(tarOf("cp.txt", small))}); err != nil {
				b.Fatal(err)
			}
		}},
		{"read", len(big), func() {
			var r struct {
				Content string `json:"content"`
			}
			s.must("POST", "/v1/agents/benchfiles/computer/read_file", map[string]any{"path": "big.txt"}, 200, &r)
			if len(r.Content) != len(big) {
				b.Fatalf("read_file read %d bytes", len(r.Content))
			}
		}, func() {
			res, err := cli.CopyFromContainer(ctx, name, client.CopyFromContainerOptions{SourcePath: "/home/berth/big.txt"})
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, res.Content)
			res.Content.Close()
			if n < int64(len(big)) {
				b.Fatalf("docker cp read %d bytes", n)
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			timed := func(f func()) func() time.Duration {
				return func() time.Duration {
					start := time.Now()
					f()
					return time.Since(start)
				}
			}
			var o, r []time.Duration
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					o, r = append(o, timed(tc.ours)()), append(r, timed(tc.base)())
				} else {
					r, o = append(r, timed(tc.base)()), append(o, timed(tc.ours)())
				}
			}
			mbps := func(d time.Duration) float64 { return float64(tc.bytes) / d.Seconds() / 1e6 }
			b.ReportMetric(mbps(median(o)), "rest-MB/s")
			b.ReportMetric(mbps(median(r)), "docker-cp-MB/s")
			b.ReportMetric(float64(median(r))/float64(median(o)), "ratio")
		})
	}
}

// hostAvailable reads MemAvailable from /proc/meminfo, in bytes.
func hostAvailable(b *testing.B) (avail, total uint64) {
	b.Helper()
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			switch f[0] {
			case "MemAvailable:":
				avail = v << 10
			case "MemTotal:":
				total = v << 10
			}
		}
	}
	return avail, total
}

// BenchmarkDensity starts BERTH_DENSITY_N (default 100) idle headless
// computers through the supervisor's REST API and reports how many
// started, the host memory each one takes (MemAvailable before and after,
// divided by the count), how many would fit in the memory that was
// available, and the RSS of the process running the supervisor. It removes
// everything it made. It is opt-in, being slow:
//
//	make bench-density    (or: BERTH_BENCH_DENSITY=1 go test ./e2e -run '^$' -bench Density -benchtime 1x)
func BenchmarkDensity(b *testing.B) {
	if os.Getenv("BERTH_BENCH_DENSITY") != "1" {
		b.Skip("opt-in: run `make bench-density` (BERTH_BENCH_DENSITY=1)")
	}
	requireDocker(b, "berth/headless:latest")
	n := 100
	if v, err := strconv.Atoi(os.Getenv("BERTH_DENSITY_N")); err == nil && v > 0 {
		n = v
	}
	s := startSupervisor(b, "berth/headless:latest")
	for i := range n {
		connect(s, fmt.Sprintf("dense%03d", i))
	}
	stats, err := docker.New(docker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	runAll := func(f func(i int)) {
		work := make(chan int)
		done := make(chan struct{})
		for range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range work {
					f(i)
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		for range 4 {
			<-done
		}
	}
	for b.Loop() {
		time.Sleep(2 * time.Second)
		before, _ := hostAvailable(b)
		var started atomicInt
		names := make([]string, n)
		begin := time.Now()
		runAll(func(i int) {
			var sess session
			st, err := callAPI(s.url, s.token, "POST", fmt.Sprintf("/v1/agents/dense%03d/computer/start", i), "", nil, &sess)
			if err == nil && st == 200 && sess.State == "running" {
				started.add(1)
				names[i] = "berth-c-" + strings.TrimPrefix(sess.ID, "s_")
			} else {
				b.Logf("start %d: status %d %v", i, st, err)
			}
		})
		took := time.Since(begin)
		time.Sleep(10 * time.Second) // let the computers settle idle
		after, _ := hostAvailable(b)
		rss := vmRSS(os.Getpid())
		// Each computer's own memory, as its cgroup counts it (page cache
		// that can be dropped excluded, as docker stats does).
		var cgroup, sampled uint64
		for _, name := range names {
			if name == "" {
				continue
			}
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			st, err := stats.Stats(sctx, name)
			cancel()
			if err == nil {
				cgroup += st.MemoryBytes
				sampled++
			}
		}
		got := started.load()
		runAll(func(i int) {
			callAPI(s.url, s.token, "POST", fmt.Sprintf("/v1/agents/dense%03d/computer/stop", i), "", nil, nil)
		})
		if got == 0 {
			b.Fatal("no computer started")
		}
		// The host's view is noisy on a shared machine; the cgroups' is not,
		// but misses the kernel's own cost: the larger of the two counts.
		host := float64(before-min(after, before)) / float64(got)
		each := host
		if sampled > 0 {
			cg := float64(cgroup) / float64(sampled)
			b.ReportMetric(cg/(1<<20), "cgroup-MB/computer")
			each = max(each, cg)
		}
		b.ReportMetric(float64(got), "computers-started")
		b.ReportMetric(host/(1<<20), "host-MB/computer")
		if each > 0 {
			b.ReportMetric(float64(before)/each, "computers-that-fit")
		}
		b.ReportMetric(float64(rss)/1024, "supervisor-rss-MB")
		b.ReportMetric(took.Seconds(), "start-all-s")
		b.ReportMetric(0, "ns/op")
	}
}

// atomicInt counts across goroutines.
type atomicInt struct{ v atomic.Int64 }

func (a *atomicInt) add(d int64) { a.v.Add(d) }
func (a *atomicInt) load() int64 { return a.v.Load() }

// fillWakeHome gives agent's persistent computer the 100 MB home of the
// wake benchmarks (50 MB of random bytes, 50 MB of base64 text) and puts
// it to sleep.
func fillWakeHome(b *testing.B, s *super, agent string) {
	b.Helper()
	s.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "docker", "persistence": "home", "leaseSeconds": 600, "dailySeconds": 36000}, 201, nil)
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
	if x := s.exec(agent, "head -c 50000000 /dev/urandom > r.bin && head -c 37500000 /dev/urandom | base64 > t.txt"); x.ExitCode != 0 {
		b.Fatalf("fill the home: %+v", x)
	}
	s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
}

// BenchmarkWarmWake times a persistent computer's wake served by the warm
// pool: REST start until the first exec answers, the pool's computer bound
// and the 100 MB home restored into it, against a warm start of a
// computer that keeps nothing, in the same run. Between timed starts the
// session stops (archiving the home again) and the pool refills.
func BenchmarkWarmWake(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	const size = 2
	s := startPoolBench(b, "berth/test:latest", size)
	connect(s, "plain")
	fillWakeHome(b, s, "wake")
	timed := func(agent string) func() time.Duration {
		return func() time.Duration {
			testkit.Eventually(b, 2*time.Minute, "the warm pool refilled", func() bool { return s.d.Service.PoolStats().Waiting >= size })
			d := startToExec(b, s, agent)
			s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
			return d
		}
	}
	claimed := s.d.Service.PoolStats().Claimed
	pairedRuns(b, "warm-wake-to-exec-ms", timed("wake"), "base-warm-start-to-exec-ms", timed("plain"))
	if got := s.d.Service.PoolStats().Claimed - claimed; got != int64(2*b.N) {
		b.Fatalf("%d of %d starts came from the pool", got, 2*b.N)
	}
}

// BenchmarkWake times a persistent computer's wake on Docker: REST start
// until the first exec answers, with a 100 MB home (50 MB of random bytes,
// 50 MB of base64 text) restored from the local object store, against a
// cold start of a computer that keeps nothing, in the same run. Between
// timed wakes the computer is stopped, which archives its home again.
func BenchmarkWake(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "plain")
	fillWakeHome(b, s, "wake")
	timed := func(agent string) func() time.Duration {
		return func() time.Duration {
			start := time.Now()
			s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
			if x := s.exec(agent, "echo hi"); x.Stdout != "hi\n" {
				b.Fatalf("%s: first exec: %+v", agent, x)
			}
			d := time.Since(start)
			s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
			return d
		}
	}
	pairedRuns(b, "wake-to-exec-ms", timed("wake"), "base-cold-start-to-exec-ms", timed("plain"))
}
