package objstore

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// BenchmarkEncrypted256MB puts 256 MB through the encrypted local store
// and reads it back, against the baseline of copying the same stream to a
// file (synced) and reading it back: sealed-MB/s and base-MB/s count the
// object's bytes per second of the round trip; ratio is sealed / base.
func BenchmarkEncrypted256MB(b *testing.B) {
	const size = 256 << 20
	e, _ := newEncryptedLocal(b)
	dir := b.TempDir()
	ctx := testkit.Context(b)
	var ours, base time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := e.Put(ctx, "bench/home", newGen(int64(i), size), nil); err != nil {
			b.Fatal(err)
		}
		rc, _, err := e.Get(ctx, "bench/home")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, rc); err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		rc.Close()
		ours += time.Since(start)

		start = time.Now()
		path := filepath.Join(dir, "plain")
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(f, newGen(int64(i), size)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		f, err = os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, f); err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		f.Close()
		base += time.Since(start)
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(ours), "sealed-MB/s")
	b.ReportMetric(mbps(base), "base-MB/s")
	b.ReportMetric(mbps(ours)/mbps(base), "ratio")
}
