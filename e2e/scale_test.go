package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
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
	idle := func() (cpuPct, rssMB float64) {
		c0, t0 := testkit.CPUTime(), time.Now()
		time.Sleep(window)
		used, took := testkit.CPUTime()-c0, time.Since(t0)
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
