package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

func TestMain(m *testing.M) {
	// BenchmarkTwoSupervisors runs this binary again as its supervisors.
	if os.Getenv(roleEnv) == "supervisor" {
		os.Exit(runSupervisorRole())
	}
	testkit.VerifyTestMain(pgtest.Wrap(m))
}

// BenchmarkExecCalls measures exec tool calls through the REST API with the
// fake provider answering at once, on SQLite and on PostgreSQL: calls per
// second with 16 clients, and the latency of one call through the
// supervisor against a direct call to the computer's daemon (the baseline,
// from the same run). The difference is the supervisor's own overhead.
//
//	go test ./supervisor/apiserver -run '^$' -bench ExecCalls -benchtime 5000x
func BenchmarkExecCalls(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlstore.OpenSQLite(context.Background(), b.TempDir()+"/berth.db")
		if err != nil {
			b.Fatal(err)
		}
		benchExec(b, newEnvWith(b, st))
	})
	b.Run("postgres", func(b *testing.B) {
		st, err := sqlstore.OpenPostgres(context.Background(), pgtest.Start(b))
		if err != nil {
			b.Fatal(err)
		}
		benchExec(b, newEnvWith(b, st))
	})
}

func benchExec(b *testing.B, e *env) {
	e.fake.SetInstantExec(true)
	e.connect("bench", 900, 3600)
	e.mustCall("POST", "/v1/agents/bench/computer/start", nil, 200, nil)
	ms, _ := e.fake.List(context.Background())
	direct := ms[0].Endpoint + "/v1/exec"
	body, _ := json.Marshal(map[string]any{"command": "echo hi"})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(url, tok string, raw []byte) time.Duration {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: status %d", url, resp.StatusCode)
		}
		return time.Since(start)
	}
	const clients = 16
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := b.N/clients + 1
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, per)
			for range per {
				mine = append(mine, post(e.srv.URL+"/v1/agents/bench/computer/exec", opToken, body))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")

	// One client at a time: through the supervisor and straight to the
	// daemon, alternating, for the overhead's percentiles.
	tok := e.machineToken()
	dbody, _ := json.Marshal(map[string]any{"command": "echo hi", "timeoutMs": 60000})
	var via, base []time.Duration
	for range 2000 {
		via = append(via, post(e.srv.URL+"/v1/agents/bench/computer/exec", opToken, body))
		base = append(base, post(direct, tok, dbody))
	}
	slices.Sort(via)
	slices.Sort(base)
	p := func(xs []time.Duration, q float64) float64 {
		return float64(xs[int(q*float64(len(xs)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(p(via, 0.5), "p50-ms")
	b.ReportMetric(p(via, 0.99), "p99-ms")
	b.ReportMetric(p(base, 0.99), "direct-p99-ms")
	b.ReportMetric(p(via, 0.99)-p(base, 0.99), "overhead-p99-ms")
	b.Logf("%s: %d calls in %v with %d clients", b.Name(), len(lat), elapsed, clients)
}
