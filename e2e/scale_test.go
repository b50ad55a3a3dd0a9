package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor/daemon"
)

// BenchmarkIdleSupervisor measures what 1,000 running sessions cost a
// supervisor that is otherwise idle: the CPU its process uses over a
// minute (its reaper, leases, heartbeats and reconciliation) and its RSS,
// against the same process idle with no session, measured first. The
// sessions run on the fake provider, whose computers are computerd
// servers in the same process, so their memory counts too. One iteration:
//
//	go test ./e2e -run '^$' -bench IdleSupervisor -benchtime 1x
func BenchmarkIdleSupervisor(b *testing.B) {
	const sessions = 1000
	const window = time.Minute
	s, _ := serveDaemon(b, daemon.Options{Providers: []string{fake.ID}, DefaultProvider: fake.ID},
		map[string]string{"FAKE_PROVIDER_DIR": b.TempDir()})
	// The fake's computers are servers in this process: they end with it.
	b.Cleanup(func() { s.d.Providers[fake.ID].(*fake.Provider).Close() })
	// cpu returns the process's CPU time so far.
	cpu := func() time.Duration {
		raw, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			b.Fatal(err)
		}
		// Fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th, in clock ticks of 1/100 s.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(u+st) * 10 * time.Millisecond
	}
	idle := func() (cpuPct, rssMB float64) {
		c0, t0 := cpu(), time.Now()
		time.Sleep(window)
		used, took := cpu()-c0, time.Since(t0)
		return 100 * float64(used) / float64(took), float64(vmRSS(os.Getpid())) / 1024
	}
	for b.Loop() {
		b.StopTimer()
		baseCPU, baseRSS := idle()
		var wg sync.WaitGroup
		work := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range work {
					a := fmt.Sprintf("idle%04d", i)
					s.must("POST", "/v1/agents", map[string]any{"id": a, "name": a}, 201, nil)
					s.must("POST", "/v1/computers", map[string]any{"agent": a, "leaseSeconds": 900, "dailySeconds": 3600}, 201, nil)
					s.must("POST", "/v1/agents/"+a+"/computer/start", nil, 200, nil)
				}
			})
		}
		for i := range sessions {
			work <- i
		}
		close(work)
		wg.Wait()
		time.Sleep(10 * time.Second) // the starts' work done
		ourCPU, ourRSS := idle()
		b.ReportMetric(ourCPU, "idle-cpu-%")
		b.ReportMetric(baseCPU, "base-idle-cpu-%")
		b.ReportMetric(ourRSS, "rss-MB")
		b.ReportMetric(baseRSS, "base-rss-MB")
		b.StartTimer()
	}
}
