package railway

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/berthdev/berth/images/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
)

// BenchmarkCycle times one computer's whole life through the provider
// against its local fake API (create, one exec through computerd, destroy)
// beside the same cycle on providers/fake in the same run, alternating
// which goes first. It reports the medians and the median of the paired
// ratios:
//
//	go test ./providers/railway -run '^$' -bench Cycle -benchtime 20x
func BenchmarkCycle(b *testing.B) {
	f := newFakeRailway(b)
	p, err := New(Options{APIURL: f.srv.URL + "/graphql/v2", DomainScheme: "http", PollInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	creds := f.creds("project")
	base := fake.New(b.TempDir(), nil)
	b.Cleanup(base.Close)
	var ours, bare, ratios []float64
	for i := 0; b.Loop(); i++ {
		var o, f time.Duration
		if i%2 == 0 {
			o, f = cycle(b, p, creds), cycle(b, base, nil)
		} else {
			f, o = cycle(b, base, nil), cycle(b, p, creds)
		}
		ours, bare = append(ours, ms(o)), append(bare, ms(f))
		ratios = append(ratios, float64(o)/float64(f))
	}
	b.ReportMetric(median(ours), "ms/cycle")
	b.ReportMetric(median(bare), "base-ms/cycle")
	b.ReportMetric(median(ratios), "ratio")
}

// cycle creates a computer, runs `true` in it and destroys it.
func cycle(b *testing.B, p providers.Provider, creds map[string]string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok := rand.Text()
	spec := providers.Spec{ComputerID: "bench" + rand.Text()[:8], SessionID: "s_bench", AttemptID: "a_" + rand.Text()[:8],
		AgentID: "bench", Deployment: "d_bench", Image: providers.ImageHeadless, TokenHash: token.Hash(tok),
		Lease: 5 * time.Minute, Credentials: creds}
	start := time.Now()
	m, err := p.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	c := computerd.NewClient(m.Endpoint, tok)
	for {
		_, err := c.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 10000})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := p.Destroy(providers.WithCredentials(ctx, creds), m.ID); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
