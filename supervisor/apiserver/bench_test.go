package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

func TestMain(m *testing.M) {
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

// BenchmarkTwoSupervisors measures exec tool calls a second, with the fake
// provider answering at once, from 16 clients spread over two supervisors
// that share one PostgreSQL database, against the same 16 clients on one
// of them, in the same run: five seconds each, one after the other. Each
// client calls its own agent's computer, so the calls do not wait on one
// another's session.
//
//	go test ./supervisor/apiserver -run '^$' -bench TwoSupervisors -benchtime 1x
func BenchmarkTwoSupervisors(b *testing.B) {
	const clients = 16
	const window = 5 * time.Second
	dsn := pgtest.Start(b)
	open := func() *env {
		st, err := sqlstore.OpenPostgres(context.Background(), dsn)
		if err != nil {
			b.Fatal(err)
		}
		e := newEnvWith(b, st)
		e.fake.SetInstantExec(true)
		return e
	}
	one, two := open(), open()
	agents := make([]string, clients)
	for i := range agents {
		agents[i] = "two" + strconv.Itoa(i)
		one.connect(agents[i], 900, 3600)
		one.mustCall("POST", "/v1/agents/"+agents[i]+"/computer/start", nil, 200, nil)
	}
	body, _ := json.Marshal(map[string]any{"command": "echo hi"})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// rate runs the clients for window, client i on urls[i%len(urls)],
	// and returns the calls a second and the share of the machine's
	// cores that were busy (everything: supervisors, clients, PostgreSQL).
	rate := func(urls ...string) (perSecond, busy float64) {
		var n atomic.Int64
		cpu0, t0 := testkit.MachineCPUTime(), time.Now()
		stop := t0.Add(window)
		var wg sync.WaitGroup
		for i, a := range agents {
			base := urls[i%len(urls)]
			wg.Go(func() {
				for time.Now().Before(stop) {
					req, _ := http.NewRequest("POST", base+"/v1/agents/"+a+"/computer/exec", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+opToken)
					resp, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("exec %s through %s: status %d", a, base, resp.StatusCode)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		cpu, took := testkit.MachineCPUTime()-cpu0, time.Since(t0)
		return float64(n.Load()) / window.Seconds(), 100 * cpu.Seconds() / took.Seconds() / float64(runtime.NumCPU())
	}
	var ours, base, oursBusy, baseBusy float64
	for b.Loop() {
		base, baseBusy = rate(one.srv.URL)
		ours, oursBusy = rate(one.srv.URL, two.srv.URL)
	}
	b.ReportMetric(ours, "calls/s")
	b.ReportMetric(base, "base-calls/s")
	b.ReportMetric(ours/base, "ratio")
	// With the machine's cores all busy for one supervisor, a second one
	// on the same machine has nothing to add: the ratio then measures the
	// machine, not the sharing.
	b.ReportMetric(oursBusy, "machine-busy-%")
	b.ReportMetric(baseBusy, "base-machine-busy-%")
}
