package lender

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

// BenchmarkLentExec measures a small exec on a lent computer the way the
// supervisor makes it (through the relay and the agent's proxy) against the
// same exec sent straight to the computer's computerd, and against the same
// command through the Docker API's exec (what `docker exec` does), taking
// turns in one run. It reports all three and the ratio to the direct call
// (the target: at most 1.5x it plus 1 ms).
func BenchmarkLentExec(b *testing.B) {
	requireDocker(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := newRig(b, "cp_bench", "", nil)
	r.set(nil)
	req, tok := request("bench")
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		r.l.Destroy(dctx, req.ComputerID)
	}()
	made, err := r.l.Create(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	rs := relayserver.New(relayserver.Config{Authenticate: func(string) (string, bool) { return "cp_bench", true }})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, rs)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer rs.Close()
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.l.Serve(lctx, relayclient.Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + relay.ConnectPath, Token: "t"})
	}()
	defer func() { stop(); <-done }()
	testkit.EventuallyContext(b, ctx, "the agent online at the relay", func() bool {
		p, ok := rs.Presence("cp_bench")
		return ok && p.Online
	})
	c, _ := r.l.lookup(req.ComputerID)
	direct := computerd.NewClient(c.endpoint, tok)
	relayed := computerd.NewClient("http://lender"+lending.EndpointPath(req.ComputerID), tok, computerd.WithTransport(rs.Transport("cp_bench")))
	for _, cl := range []*computerd.Client{direct, relayed} {
		testkit.EventuallyContext(b, ctx, "computerd to answer", func() bool { _, err := cl.Health(ctx); return err == nil })
	}
	run := func(cl *computerd.Client) time.Duration {
		start := time.Now()
		res, err := cl.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 10000})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", res, err)
		}
		return time.Since(start)
	}
	dockerExec := func() time.Duration {
		start := time.Now()
		ex, err := cli.ExecCreate(ctx, made.MachineID, client.ExecCreateOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
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
	run(direct)
	run(relayed)
	dockerExec()
	b.ResetTimer()
	var dt, rt, xt time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 { // which of the two goes first takes turns
			dt += run(direct)
			rt += run(relayed)
		} else {
			rt += run(relayed)
			dt += run(direct)
		}
		xt += dockerExec()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(dt.Microseconds())/n, "direct-µs/op")
	b.ReportMetric(float64(xt.Microseconds())/n, "docker-exec-µs/op")
	b.ReportMetric(float64(rt.Microseconds())/n, "relayed-µs/op")
	b.ReportMetric(float64(rt)/float64(dt), "ratio")
}

// BenchmarkLentCreate measures a start on a lent machine, from the create
// to the first command answered, from the warm pool and cold, alternating
// the two in one run on the real engine. It reports both and their ratio.
func BenchmarkLentCreate(b *testing.B) {
	requireDocker(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	agent := uniqueAgent("cp_bench_pool")
	removeDeployment(b, agent)
	r := newRig(b, agent, "", nil)
	r.set(func(s *control.Settings) { s.MaxComputers = 3; s.WarmPoolSize = 1 })
	if _, err := r.l.Start(ctx); err != nil {
		b.Fatal(err)
	}
	setPool := func(n int) {
		if _, err := r.l.UpdateSettings(control.SettingsUpdate{WarmPoolSize: ptr(n)}); err != nil {
			b.Fatal(err)
		}
		waitPool(b, ctx, r, n)
	}
	startOne := func() time.Duration {
		req, tok := request("bench")
		t0 := time.Now()
		if _, err := r.l.Create(ctx, req); err != nil {
			b.Fatal(err)
		}
		c, _ := r.l.lookup(req.ComputerID)
		cl := computerd.NewClient(c.endpoint, tok, computerd.WithTransport(r.l.transport))
		testkit.EventuallyContext(b, ctx, "a first exec", func() bool {
			x, err := cl.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 10000})
			return err == nil && x.ExitCode == 0
		})
		took := time.Since(t0)
		b.StopTimer()
		if err := r.l.Destroy(ctx, req.ComputerID); err != nil {
			b.Fatal(err)
		}
		return took
	}
	waitPool(b, ctx, r, 1)
	var warm, cold time.Duration
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		setPool(1)
		b.StartTimer()
		warm += startOne()
		setPool(0)
		b.StartTimer()
		cold += startOne()
	}
	n := float64(b.N)
	b.ReportMetric(float64(warm.Microseconds())/n/1000, "pool-ms/op")
	b.ReportMetric(float64(cold.Microseconds())/n/1000, "base-cold-ms/op")
	b.ReportMetric(float64(warm)/float64(cold), "ratio")
}
