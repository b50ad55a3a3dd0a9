package docker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

// BenchmarkColdStart compares Create (network, home with its disk quota
// and hardened container, until the container runs) with a bare ContainerCreate and
// ContainerStart of the same image on the engine's default network, measured
// in the same run, alternating which goes first. It reports the medians and
// the median of the paired ratios:
//
//	go test ./providers/docker -run '^$' -bench ColdStart -benchtime 10x
func BenchmarkColdStart(b *testing.B) {
	// Each computer's network made when it starts, and taken from the pool
	// of networks made ahead of time (the default; see netpool.go).
	b.Run("network-at-start", func(b *testing.B) { benchColdStart(b, Options{}, testImage) })
	b.Run("network-pool", func(b *testing.B) {
		benchColdStart(b, Options{HeadlessImage: poolImage, NetworkPool: DefaultNetworkPool}, poolImage)
	})
	// The same without the disk quota (COMPUTER_DISK_MB=0): what the
	// quota's helper containers cost a create.
	b.Run("network-pool-no-quota", func(b *testing.B) {
		benchColdStart(b, Options{HeadlessImage: poolImage, NetworkPool: DefaultNetworkPool, DiskMB: NoDiskLimit}, poolImage)
	})
}

func benchColdStart(b *testing.B, opts Options, image string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	d := newTestDocker(b, ctx, opts)
	d.log = slog.New(slog.DiscardHandler)
	if d.pool != nil {
		d.Warm(ctx)
		testkit.EventuallyContext(b, ctx, "the network pool filled", func() bool { return d.pool.readyCount() >= d.pool.size })
	}
	timeOurs := func() time.Duration {
		start := time.Now()
		m := benchCreate(b, ctx, d)
		took := time.Since(start)
		if err := d.Destroy(ctx, m.ID); err != nil {
			b.Fatal(err)
		}
		return took
	}
	timeBare := func() time.Duration {
		name := "berth-provider-bench-" + randomID(b)
		b.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			d.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		})
		start := time.Now()
		if _, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Image: image}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		if _, err := d.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		return took
	}
	ours, bare := testkit.PairedRuns(b, timeOurs, timeBare)
	b.ReportMetric(float64(median(ours).Microseconds())/1000, "create-ms")
	b.ReportMetric(float64(median(bare).Microseconds())/1000, "bare-ms")
	b.ReportMetric(testkit.PairRatio(ours, bare), "ratio")
	b.Logf("create %v, bare create+start %v", ours, bare)
}

func median[T time.Duration | float64](xs []T) T { return testkit.Median(xs) }

// benchCreate creates a computer of the test spec on d, destroyed when the
// benchmark ends if it is still there.
func benchCreate(b *testing.B, ctx context.Context, d *Docker) providers.Machine {
	b.Helper()
	spec := testSpec(b)
	b.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		d.Destroy(ctx, ContainerPrefix+spec.ComputerID)
	})
	m, err := d.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	return m
}
