package apiserver_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/miniotest"
	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor"
)

// The persistence benchmarks run the supervisor's own path (computerd's
// archive over HTTP on loopback, sealed, into the local object store) on a
// computer of the fake provider, whose computerd is the real one.

// fillHome writes a mixed folder of about size bytes under home: a quarter
// random bytes, half text, a quarter small files (half text, half random)
// in 64 folders. It returns the bytes written.
func fillHome(b *testing.B, home string, size int64) int64 {
	b.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	random := rand.NewChaCha8([32]byte{9})
	words := strings.Fields("the quick brown fox jumps over a lazy dog while agents write code and notes func return nil error")
	text := func(n int) []byte {
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(10) == 0 {
				sb.WriteByte('\n')
			} else {
				sb.WriteByte(' ')
			}
		}
		return []byte(sb.String()[:n])
	}
	noise := func(n int) []byte {
		p := make([]byte, n)
		random.Read(p)
		return p
	}
	var total int64
	write := func(name string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, name)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(data))
	}
	const chunk = 16 << 20
	for i := int64(0); i < size/4/chunk; i++ {
		write(fmt.Sprintf("data/random-%02d.bin", i), noise(chunk))
	}
	for i := int64(0); i < size/2/chunk; i++ {
		write(fmt.Sprintf("logs/text-%02d.log", i), text(chunk))
	}
	for i := 0; total < size; i++ {
		n := 4<<10 + rng.IntN(120<<10)
		name := fmt.Sprintf("src/pkg%02d/file%04d", i%64, i)
		if i%2 == 0 {
			write(name+".go", text(n))
		} else {
			write(name+".bin", noise(n))
		}
	}
	return total
}

// homeOf returns the home folder of the agent's running fake computer.
func (e *homeEnv) homeOf(b *testing.B, agent string) string {
	b.Helper()
	x, err := e.st.LiveSession(context.Background(), agent)
	if err != nil {
		b.Fatal(err)
	}
	home := e.fake.Home(x.MachineID)
	if home == "" {
		b.Fatalf("no home for machine %s", x.MachineID)
	}
	return home
}

// BenchmarkSleep1GiB times the sleep of a 1 GiB mixed home at a stop
// (archived through computerd, sealed, into the local store; then the
// machine removed), against `tar -c | zstd -1` of the same folder into a
// file on the host, in the same run. Between pairs the computer wakes
// again (untimed), in a new machine with the home restored.
func BenchmarkSleep1GiB(b *testing.B) {
	if _, err := exec.LookPath("zstd"); err != nil {
		b.Fatalf("the baseline needs the zstd command: %v", err)
	}
	e := newHomeEnv(b)
	e.connectHome("sleep", nil)
	e.mustCall("POST", "/v1/agents/sleep/computer/start", nil, 200, nil)
	size := fillHome(b, e.homeOf(b, "sleep"), 1<<30)
	// The baseline reads a copy: the home moves to a new machine at
	// every wake.
	home := filepath.Join(b.TempDir(), "home")
	if msg, err := exec.Command("cp", "-a", e.homeOf(b, "sleep"), home).CombinedOutput(); err != nil {
		b.Fatalf("copy the home: %v: %s", err, msg)
	}
	out := filepath.Join(b.TempDir(), "base.tar.zst")
	// The CPU the sleeps took, in this process (supervisor and computerd).
	var cpu, wall time.Duration
	ours, base := alternate(b, func() {
		c0, t0 := testkit.CPUTime(), time.Now()
		e.mustCall("POST", "/v1/agents/sleep/computer/stop", nil, 200, nil)
		cpu, wall = cpu+testkit.CPUTime()-c0, wall+time.Since(t0)
	}, func() {
		cmd := exec.Command("sh", "-c", `tar -C "$1" -cf - . | zstd -1 -q -c > "$2"`, "sh", home, out)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("tar | zstd: %v: %s", err, msg)
		}
	}, func() {
		e.mustCall("POST", "/v1/agents/sleep/computer/start", nil, 200, nil)
		e.mustCall("POST", "/v1/agents/sleep/computer/exec", map[string]any{"command": "true"}, 200, nil)
	})
	o, r := medianOf(ours), medianOf(base)
	b.ReportMetric(o.Seconds(), "sleep-s")
	b.ReportMetric(r.Seconds(), "base-tar-zstd-s")
	b.ReportMetric(o.Seconds()/r.Seconds(), "ratio")
	b.ReportMetric(float64(size)/1e6/o.Seconds(), "sleep-MB/s")
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "sleep-busy-cores")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCheckpointExec measures what a checkpoint of a running
// computer costs the agent: the p50 latency of `true` through the REST
// exec while a 512 MB home is archived, against its p50 on the idle
// computer in the same run.
func BenchmarkCheckpointExec(b *testing.B) {
	e := newHomeEnv(b)
	e.connectHome("cpx", map[string]any{"maxCheckpoints": 1})
	e.mustCall("POST", "/v1/agents/cpx/computer/start", nil, 200, nil)
	fillHome(b, e.homeOf(b, "cpx"), 512<<20)
	execOnce := func() time.Duration {
		t0 := time.Now()
		e.mustCall("POST", "/v1/agents/cpx/computer/exec", map[string]any{"command": "true"}, 200, nil)
		return time.Since(t0)
	}
	var idle, during []time.Duration
	for b.Loop() {
		for range 20 {
			idle = append(idle, execOnce())
		}
		var wg sync.WaitGroup
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			e.mustCall("POST", "/v1/agents/cpx/computer/checkpoints", map[string]any{"name": "bench"}, 200, nil)
		})
	calls:
		for n := 0; n < 10_000; n++ {
			select {
			case <-done:
				break calls
			default:
				during = append(during, execOnce())
			}
		}
		wg.Wait()
		e.mustCall("DELETE", "/v1/agents/cpx/computer/checkpoints/bench", nil, 200, nil)
	}
	if len(during) < 5 {
		b.Fatalf("only %d execs ran during the checkpoints", len(during))
	}
	i, d := medianOf(idle), medianOf(during)
	b.Logf("%d execs idle, %d during checkpoints", len(idle), len(during))
	b.ReportMetric(float64(d.Microseconds())/1000, "checkpoint-exec-p50-ms")
	b.ReportMetric(float64(i.Microseconds())/1000, "base-idle-exec-p50-ms")
	b.ReportMetric(float64(d)/float64(i), "ratio")
	b.ReportMetric(0, "ns/op")
}

// alternate times ours and base once each per loop of b, the first of the
// pair swapping every loop, and runs after (untimed) after each pair.
func alternate(b *testing.B, ours, base, after func()) (o, r []time.Duration) {
	timed := func(f func(), into *[]time.Duration) {
		t0 := time.Now()
		f()
		*into = append(*into, time.Since(t0))
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			timed(base, &r)
			timed(ours, &o)
		} else {
			timed(ours, &o)
			timed(base, &r)
		}
		after()
	}
	return o, r
}

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkWake1GiB times a wake of a 1 GiB mixed home from the local
// store (REST start until the first exec answers: a new computer of the
// fake provider, the archive opened, checked and restored into it) against
// `zstd -d | tar -x` of the same archive on the host, in the same run.
// Between wakes (untimed) the computer is stopped, which archives the home
// again.
func BenchmarkWake1GiB(b *testing.B) {
	if _, err := exec.LookPath("zstd"); err != nil {
		b.Fatalf("the baseline needs the zstd command: %v", err)
	}
	e := newHomeEnv(b)
	e.connectHome("wake", nil)
	e.mustCall("POST", "/v1/agents/wake/computer/start", nil, 200, nil)
	size := fillHome(b, e.homeOf(b, "wake"), 1<<30)
	// The baseline's archive: the home as computerd archives it.
	plain := filepath.Join(b.TempDir(), "home.tar.zst")
	if out, err := exec.Command("sh", "-c", `tar -C "$1" -cf - . | zstd -1 -q -c > "$2"`, "sh", e.homeOf(b, "wake"), plain).CombinedOutput(); err != nil {
		b.Fatalf("tar | zstd: %v: %s", err, out)
	}
	e.mustCall("POST", "/v1/agents/wake/computer/stop", nil, 200, nil)
	into := filepath.Join(b.TempDir(), "into")
	ours, base := alternate(b, func() {
		e.mustCall("POST", "/v1/agents/wake/computer/start", nil, 200, nil)
		e.mustCall("POST", "/v1/agents/wake/computer/exec", map[string]any{"command": "true"}, 200, nil)
	}, func() {
		if err := os.MkdirAll(into, 0o755); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", `zstd -d -q -c "$1" | tar -C "$2" -xf -`, "sh", plain, into)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("zstd -d | tar -x: %v: %s", err, msg)
		}
	}, func() {
		e.mustCall("POST", "/v1/agents/wake/computer/stop", nil, 200, nil)
		os.RemoveAll(into)
	})
	o, r := medianOf(ours), medianOf(base)
	b.ReportMetric(o.Seconds(), "wake-s")
	b.ReportMetric(r.Seconds(), "base-zstd-tar-x-s")
	b.ReportMetric(o.Seconds()/r.Seconds(), "ratio")
	b.ReportMetric(float64(size)/1e6/o.Seconds(), "wake-MB/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSleepWakeS3 times the sleep path (a checkpoint, which archives
// as a sleep does) and the wake (a start from that checkpoint until the
// first exec answers) of a 256 MB mixed home with its archives sealed in a
// real MinIO bucket on loopback, against the same two with the local
// store, in the same run.
func BenchmarkSleepWakeS3(b *testing.B) {
	srv := miniotest.Start(b)
	tr := &http.Transport{}
	b.Cleanup(tr.CloseIdleConnections)
	bucket, err := objstore.NewS3(objstore.S3Config{
		Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		Bucket: srv.Bucket, Prefix: "bench/", Transport: tr,
	})
	if err != nil {
		b.Fatal(err)
	}
	s3 := newHomeEnv(b, func(c *supervisor.Config) { c.Objects = sealed(b, bucket) })
	local := newHomeEnv(b)
	var size int64
	for _, e := range []*homeEnv{s3, local} {
		e.connectHome("s", map[string]any{"maxCheckpoints": 1})
		e.mustCall("POST", "/v1/agents/s/computer/start", nil, 200, nil)
		size = fillHome(b, e.homeOf(b, "s"), 256<<20)
	}
	var sleeps, wakes [2][]time.Duration
	round := func(i int, e *homeEnv) {
		t0 := time.Now()
		e.mustCall("POST", "/v1/agents/s/computer/checkpoints", map[string]any{"name": "b"}, 200, nil)
		sleeps[i] = append(sleeps[i], time.Since(t0))
		e.mustCall("POST", "/v1/agents/s/computer/stop", nil, 200, nil)
		t0 = time.Now()
		e.mustCall("POST", "/v1/agents/s/computer/start", map[string]any{"checkpoint": "b"}, 200, nil)
		e.mustCall("POST", "/v1/agents/s/computer/exec", map[string]any{"command": "true"}, 200, nil)
		wakes[i] = append(wakes[i], time.Since(t0))
		e.mustCall("DELETE", "/v1/agents/s/computer/checkpoints/b", nil, 200, nil)
	}
	for n := 0; b.Loop(); n++ {
		if n%2 == 0 {
			round(0, s3)
			round(1, local)
		} else {
			round(1, local)
			round(0, s3)
		}
	}
	mbs := func(d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }
	ss, ls, sw, lw := medianOf(sleeps[0]), medianOf(sleeps[1]), medianOf(wakes[0]), medianOf(wakes[1])
	b.ReportMetric(ss.Seconds(), "s3-sleep-s")
	b.ReportMetric(ls.Seconds(), "base-local-sleep-s")
	b.ReportMetric(mbs(ss), "s3-sleep-MB/s")
	b.ReportMetric(sw.Seconds(), "s3-wake-s")
	b.ReportMetric(lw.Seconds(), "base-local-wake-s")
	b.ReportMetric(mbs(sw), "s3-wake-MB/s")
	b.ReportMetric(0, "ns/op")
}
