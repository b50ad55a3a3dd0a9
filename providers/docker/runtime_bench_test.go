package docker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

// BenchmarkRuntimeReady compares a computer's create -> ready (Create,
// then computerd answering /healthz) under gVisor's runsc with the same
// under runc, in the same run, alternating which goes first. It needs an
// engine that lists runsc (make test-runsc registers it while it runs):
//
//	go test ./providers/docker -run '^$' -bench RuntimeReady -benchtime 5x
func BenchmarkRuntimeReady(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	byRuntime := map[string]*Docker{}
	for _, rt := range []string{"runc", DetectedRuntime} {
		d := newTestDocker(b, ctx, Options{Runtime: rt, HeadlessImage: poolImage})
		d.log = slog.New(slog.DiscardHandler)
		c, err := d.Runtime(ctx)
		if err != nil {
			b.Skipf("%v: run `make test-runsc`, which registers runsc with the engine while it runs", err)
		}
		if c.Name != rt {
			b.Fatalf("runtime %s, want %s", c.Name, rt)
		}
		byRuntime[rt] = d
	}
	ready := func(d *Docker) time.Duration {
		start := time.Now()
		m := benchCreate(b, ctx, d)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := computerd.NewClient(m.Endpoint, "").WaitHealthy(wctx)
		cancel()
		if err != nil {
			b.Fatalf("computerd at %s: %v", m.Endpoint, err)
		}
		took := time.Since(start)
		if err := d.Destroy(ctx, m.ID); err != nil {
			b.Fatal(err)
		}
		return took
	}
	runc, runsc := testkit.PairedRuns(b,
		func() time.Duration { return ready(byRuntime["runc"]) },
		func() time.Duration { return ready(byRuntime[DetectedRuntime]) })
	b.ReportMetric(float64(median(runsc).Microseconds())/1000, "runsc-ready-ms")
	b.ReportMetric(float64(median(runc).Microseconds())/1000, "runc-ready-ms")
	b.ReportMetric(testkit.PairRatio(runsc, runc), "ratio")
	b.Logf("create -> ready: runsc %v, runc %v", runsc, runc)
}
