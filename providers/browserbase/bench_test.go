package browserbase

import (
	"context"
	"crypto/rand"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/berthdev/berth/providers"
)

// BenchmarkCycle times one browser session's whole life through the
// provider against its local fake API (create with a real headless
// Chromium behind it, one health check through the provider's transport,
// release) beside a bare launch and kill of the same Chromium in the same
// run, alternating which goes first; a browser session has no exec, so the
// browser's own start is the floor it is measured against. It reports the
// medians and the median of the paired ratios:
//
//	go test ./providers/browserbase -run '^$' -bench Cycle -benchtime 10x
func BenchmarkCycle(b *testing.B) {
	f := newFakeBrowserbase(b)
	p, err := New(Options{APIURL: f.srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	creds := map[string]string{CredAPIKey: f.Key}
	var ours, bare, ratios []float64
	for i := 0; b.Loop(); i++ {
		var o, c time.Duration
		if i%2 == 0 {
			o, c = cycle(b, p, creds), bareChromium(b)
		} else {
			c, o = bareChromium(b), cycle(b, p, creds)
		}
		ours, bare = append(ours, ms(o)), append(bare, ms(c))
		ratios = append(ratios, float64(o)/float64(c))
	}
	b.ReportMetric(median(ours), "ms/cycle")
	b.ReportMetric(median(bare), "base-ms/cycle")
	b.ReportMetric(median(ratios), "ratio")
}

func cycle(b *testing.B, p *Browserbase, creds map[string]string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := providers.Spec{ComputerID: "bench" + rand.Text()[:8], AttemptID: "a_" + rand.Text()[:8], AgentID: "bench",
		Deployment: "d_bench", Lease: 5 * time.Minute, Credentials: creds}
	start := time.Now()
	m, err := p.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", m.Endpoint+"/healthz", nil)
	resp, err := p.Transport(m, creds).RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := p.Destroy(providers.WithCredentials(ctx, creds), m.ID); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func bareChromium(b *testing.B) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	c, err := startChromium(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c.stop()
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
