// Package hostedtest holds what the hosted providers' tests and benchmarks
// share: the provider-level cycle benchmark, measured against a baseline
// in the same run, the bad days of their hand-written fake APIs (Faults),
// and the checks of what `berth providers` shows (which the docker, local
// and tunnel providers' tests use too).
package hostedtest

import (
	"context"
	"crypto/rand"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
)

// BenchCycle runs ours and base alternately under b.Loop (which goes
// first swaps every iteration, so neither always meets a warm cache) and
// reports the median of each (ms/cycle, base-ms/cycle) and the median of
// the paired ratios (ratio).
func BenchCycle(b *testing.B, ours, base func() time.Duration) {
	b.Helper()
	var o, f, ratios []float64
	for i := 0; b.Loop(); i++ {
		var do, df time.Duration
		if i%2 == 0 {
			do, df = ours(), base()
		} else {
			df, do = base(), ours()
		}
		o, f = append(o, ms(do)), append(f, ms(df))
		ratios = append(ratios, float64(do)/float64(df))
	}
	b.ReportMetric(Median(o), "ms/cycle")
	b.ReportMetric(Median(f), "base-ms/cycle")
	b.ReportMetric(Median(ratios), "ratio")
}

// BenchComputerCycle is BenchCycle for a provider of computers: each
// cycle creates a computer with p, runs `true` in it through computerd
// and destroys it, against the same cycle on providers/fake.
func BenchComputerCycle(b *testing.B, p providers.Provider, creds map[string]string) {
	b.Helper()
	base := fake.New(b.TempDir(), nil)
	b.Cleanup(base.Close)
	BenchCycle(b, func() time.Duration { return ComputerCycle(b, p, creds) }, func() time.Duration { return ComputerCycle(b, base, nil) })
}

// ComputerCycle creates a computer with p, runs `true` in it through
// computerd (retried until computerd answers, for at most a minute) and
// destroys it, and returns how long that took.
func ComputerCycle(b testing.TB, p providers.Provider, creds map[string]string) time.Duration {
	b.Helper()
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

// Median returns the middle of xs (the upper one of an even count), or 0
// for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// RequireDescribed checks what `berth providers` shows for provider id: a
// summary, and the setting or credential named name, which a connection
// cannot do without, marked required with help, and secret (kept out of
// what is shown) when secret is true.
func RequireDescribed(t testing.TB, id, name string, secret bool) {
	t.Helper()
	d := Described(t, id)
	for _, s := range append(slices.Clone(d.Settings), d.Credentials...) {
		if s.Name == name {
			if !s.Required || s.Help == "" || s.Secret != secret {
				t.Errorf("%s: %+v, want required with help, secret %v", s.Name, s, secret)
			}
			return
		}
	}
	t.Errorf("%s is not described: %+v", name, d)
}

// Described returns what `berth providers` shows for provider id, failing
// t unless it is described with a summary.
func Described(t testing.TB, id string) providers.Description {
	t.Helper()
	d, ok := providers.DescriptionOf(id)
	if !ok || d.Summary == "" {
		t.Fatalf("DescriptionOf(%q) = %+v, %v", id, d, ok)
	}
	return d
}

// RequireSettingsRead fails t unless the settings d describes are exactly
// those the provider's configuration read (each once or more, in any
// order).
func RequireSettingsRead(t testing.TB, d providers.Description, read []string) {
	t.Helper()
	read = slices.Clone(read)
	slices.Sort(read)
	read = slices.Compact(read)
	var described []string
	for _, s := range d.Settings {
		described = append(described, s.Name)
	}
	slices.Sort(described)
	if !slices.Equal(read, described) {
		t.Errorf("described settings %v, want the ones read: %v", described, read)
	}
}

// Faults are the bad days a hand-written fake API plays, and the lock it
// serves under. A fake embeds it; its methods are the fake's
// providertest.Faults.
type Faults struct {
	Mu sync.Mutex
	// Refuse refuses every call's credentials while set.
	Refuse bool
	// RateLimit is how many of the next creates answer 429, LoseReplies
	// how many run and then lose their answer, FailDeletes how many
	// deletes fail and delete nothing.
	RateLimit, LoseReplies, FailDeletes int
}

// LoseNextCreateReply makes the next create run and lose its answer.
func (f *Faults) LoseNextCreateReply() { f.Mu.Lock(); f.LoseReplies++; f.Mu.Unlock() }

// FailNextDeletes makes the next n deletes fail.
func (f *Faults) FailNextDeletes(n int) { f.Mu.Lock(); f.FailDeletes += n; f.Mu.Unlock() }

// RefuseCredentials refuses every call's credentials while on.
func (f *Faults) RefuseCredentials(on bool) { f.Mu.Lock(); f.Refuse = on; f.Mu.Unlock() }

// Take counts one off *n and reports whether there was one (with Mu held).
func Take(n *int) bool {
	if *n <= 0 {
		return false
	}
	*n--
	return true
}

// HangUp closes the request's connection without an answer, as a reply
// lost on the way.
func HangUp(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}
