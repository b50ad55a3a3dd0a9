package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// supervisorCores is the CPU time a second that each supervisor of
// BenchmarkTwoSupervisors/own-cores may use: a quarter of a core, so that
// two of them, PostgreSQL, the clients and the computers fit in two cores
// with room to spare.
const supervisorCores = 0.25

// The supervisor role: this test binary started again as one supervisor on
// the PostgreSQL database at roleDSNEnv.
const (
	roleEnv    = "BERTH_APISERVER_BENCH_ROLE"
	roleDSNEnv = "BERTH_APISERVER_BENCH_DSN"
)

// BenchmarkTwoSupervisors measures exec tool calls a second, with the fake
// provider answering at once, from 16 clients spread over two supervisors
// that share one PostgreSQL database, against the same 16 clients on one
// of them, in the same run: five seconds each, one after the other. Each
// client calls its own agent's computer, so the calls do not wait on one
// another's session.
//
// own-cores runs each supervisor as a process of its own (this test binary
// in the supervisor role), held by a cgroup to supervisorCores of CPU time
// a second, as a supervisor on a machine of its own is held to that
// machine's cores. PostgreSQL, the clients and the computers (the fake
// provider's, served by this process) are not held. It is the row with a
// target: a second supervisor must add what a second machine would.
//
// shared-cores runs both supervisors in this process, sharing the
// machine's cores with everything else. Where one supervisor already keeps
// every core busy, a second has nothing to add, so this row measures the
// machine and is kept for information.
//
//	go test ./supervisor/apiserver -run '^$' -bench TwoSupervisors -benchtime 1x
func BenchmarkTwoSupervisors(b *testing.B) {
	b.Run("own-cores", func(b *testing.B) {
		dsn := pgtest.Start(b)
		agents := startAgents(openPostgresEnv(b, dsn))
		one, onePid := startSupervisorRole(b, dsn, supervisorCores)
		two, twoPid := startSupervisorRole(b, dsn, supervisorCores)
		compareRates(b, agents, one, two, onePid, twoPid)
	})
	b.Run("shared-cores", func(b *testing.B) {
		dsn := pgtest.Start(b)
		one, two := openPostgresEnv(b, dsn), openPostgresEnv(b, dsn)
		compareRates(b, startAgents(one), one.srv.URL, two.srv.URL)
	})
}

// TestSupervisorRole runs the machinery of BenchmarkTwoSupervisors/own-cores
// small: two supervisors in processes of their own, each held to
// supervisorCores, answer exec calls for a computer started through a third
// on the same database, and the second replays the answer the first
// recorded for an Idempotency-Key.
func TestSupervisorRole(t *testing.T) {
	dsn := pgtest.Start(t)
	e := openPostgresEnv(t, dsn)
	e.connect("role", 900, 3600)
	e.mustCall("POST", "/v1/agents/role/computer/start", nil, 200, nil)
	one, _ := startSupervisorRole(t, dsn, supervisorCores)
	two, _ := startSupervisorRole(t, dsn, supervisorCores)
	exec := func(base string) (string, http.Header) {
		req, _ := http.NewRequest("POST", base+"/v1/agents/role/computer/exec", bytes.NewReader([]byte(`{"command":"echo hi"}`)))
		req.Header.Set("Authorization", "Bearer "+opToken)
		req.Header.Set("Idempotency-Key", "role-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != 200 {
			t.Fatalf("exec through %s: %d %s", base, resp.StatusCode, body)
		}
		return string(body), resp.Header
	}
	first, h1 := exec(one)
	again, h2 := exec(two)
	if h1.Get(apiserver.HeaderReplayed) != "" || h2.Get(apiserver.HeaderReplayed) != "true" || again != first {
		t.Fatalf("the second supervisor did not replay the first one's answer: %q (%v) then %q (%v)", first, h1, again, h2)
	}
}

// openPostgresEnv is an env in this process on the database at dsn, its
// fake provider's computers answering exec at once.
func openPostgresEnv(tb testing.TB, dsn string) *env {
	tb.Helper()
	st, err := sqlstore.OpenPostgres(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	e := newEnvWith(tb, st)
	e.fake.SetInstantExec(true)
	return e
}

// startAgents connects 16 agents on e and starts their computers.
func startAgents(e *env) []string {
	agents := make([]string, 16)
	for i := range agents {
		agents[i] = "two" + strconv.Itoa(i)
		e.connect(agents[i], 900, 3600)
		e.mustCall("POST", "/v1/agents/"+agents[i]+"/computer/start", nil, 200, nil)
	}
	return agents
}

// startSupervisorRole starts a supervisor in a process of its own on the
// database at dsn, held to cores of CPU time a second, and returns its URL
// and process id.
func startSupervisorRole(tb testing.TB, dsn string, cores float64) (string, int) {
	tb.Helper()
	url, proc := testkit.StartRole(tb, roleEnv+"=supervisor", roleDSNEnv+"="+dsn)
	testkit.LimitCPU(tb, proc.Pid, cores)
	return url, proc.Pid
}

// compareRates runs one client per agent for five seconds against one,
// then for five seconds spread over one and two, and reports both rates,
// their ratio and how busy the machine's cores were in each. Given the
// supervisors' process ids (onePid, twoPid), it reports too the cores each
// supervisor used on average, to be read against the cores it may use.
func compareRates(b *testing.B, agents []string, one, two string, pids ...int) {
	const window = 5 * time.Second
	body, _ := json.Marshal(map[string]any{"command": "echo hi"})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	// rate runs the clients for window, client i on urls[i%len(urls)],
	// and returns the calls a second and the share of the machine's
	// cores that were busy (everything: supervisors, clients, PostgreSQL).
	supervisorsCPU := func(pids []int) (sum time.Duration) {
		for _, pid := range pids {
			sum += testkit.ProcessCPUTime(pid)
		}
		return sum
	}
	rate := func(urls []string, pids []int) (perSecond, busy, coresEach float64) {
		var n atomic.Int64
		cpu0, t0, sup0 := testkit.MachineCPUTime(), time.Now(), supervisorsCPU(pids)
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
		cpu, took, sup := testkit.MachineCPUTime()-cpu0, time.Since(t0), supervisorsCPU(pids)-sup0
		if len(pids) > 0 {
			coresEach = sup.Seconds() / took.Seconds() / float64(len(pids))
		}
		return float64(n.Load()) / window.Seconds(), 100 * cpu.Seconds() / took.Seconds() / float64(runtime.NumCPU()), coresEach
	}
	var onePids, bothPids []int
	if len(pids) == 2 {
		onePids, bothPids = pids[:1], pids
	}
	var ours, base, oursBusy, baseBusy, oursCores, baseCores float64
	for b.Loop() {
		base, baseBusy, baseCores = rate([]string{one}, onePids)
		ours, oursBusy, oursCores = rate([]string{one, two}, bothPids)
	}
	b.ReportMetric(ours, "calls/s")
	b.ReportMetric(base, "base-calls/s")
	b.ReportMetric(ours/base, "ratio")
	b.ReportMetric(oursBusy, "machine-busy-%")
	b.ReportMetric(baseBusy, "base-machine-busy-%")
	if len(pids) == 2 {
		b.ReportMetric(oursCores, "cores-each")
		b.ReportMetric(baseCores, "base-cores-each")
	}
}

// runSupervisorRole serves a supervisor on the database at roleDSNEnv, its
// fake provider's computers answering exec at once, on a loopback port
// that it prints; it ends when its standard input closes.
func runSupervisorRole() int {
	rt := &roleT{}
	defer rt.cleanup()
	dir, err := os.MkdirTemp("", "berth-bench-supervisor-")
	if err != nil {
		rt.Fatalf("%v", err)
	}
	rt.Cleanup(func() { os.RemoveAll(dir) })
	st, err := sqlstore.OpenPostgres(context.Background(), os.Getenv(roleDSNEnv))
	if err != nil {
		rt.Fatalf("%v", err)
	}
	rt.Cleanup(func() { st.Close() })
	e := newService(rt, dir, st)
	rt.Cleanup(func() { e.fake.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rt.Fatalf("%v", err)
	}
	srv := &http.Server{Handler: e.h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	rt.Cleanup(func() { srv.Close() })
	fmt.Printf("http://%s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin) // closed by StartRole when the benchmark ends
	return 0
}

// roleT is what newService needs of a test, in the supervisor role: a
// fatal error runs the cleanups and ends the process.
type roleT struct{ cleanups []func() }

func (r *roleT) Helper()          {}
func (r *roleT) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *roleT) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "supervisor role: "+format+"\n", args...)
	r.cleanup()
	os.Exit(2)
}

func (r *roleT) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}
