package providertest

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/berthdev/berth/providers/fake"
)

// BenchmarkCycle times one session's whole life through the supervisor
// (start, one exec, stop, over the REST API) on the provider h describes,
// beside the same cycle on providers/fake in the same run, alternating
// which goes first. It reports the medians (ms/cycle, base-ms/cycle) and
// the median of the paired ratios (ratio). A provider's benchmark is one
// line:
//
//	func BenchmarkCycle(b *testing.B) { providertest.BenchmarkCycle(b, harness) }
func BenchmarkCycle(b *testing.B, h Harness) {
	ours := newEnv(b, h)
	base := newEnv(b, Harness{ID: fake.ID, New: func(t T, log *slog.Logger) Target {
		p := fake.New(t.TempDir(), log)
		t.Cleanup(p.Close)
		return Target{Provider: p, Faults: NoFaults{}, Exists: func(ctx context.Context, label, value string) (bool, error) {
			ms, err := p.List(ctx)
			for _, m := range ms {
				if m.Labels[label] == value {
					return true, nil
				}
			}
			return false, err
		}}
	}})
	ours.connect("bench")
	base.connect("bench")
	var o, f, ratios []float64
	for i := 0; b.Loop(); i++ {
		var do, df time.Duration
		if i%2 == 0 {
			do, df = ours.cycle(), base.cycle()
		} else {
			df, do = base.cycle(), ours.cycle()
		}
		o, f = append(o, ms(do)), append(f, ms(df))
		ratios = append(ratios, float64(do)/float64(df))
	}
	b.ReportMetric(median(o), "ms/cycle")
	b.ReportMetric(median(f), "base-ms/cycle")
	b.ReportMetric(median(ratios), "ratio")
}

// cycle starts the bench agent's computer, runs one command and stops it.
func (e *env) cycle() time.Duration {
	start := time.Now()
	e.start("bench")
	if r := e.exec("bench", "echo ok"); r.Stdout != "ok\n" {
		e.t.Fatalf("exec: %+v", r)
	}
	e.must("POST", "/v1/agents/bench/computer/stop", nil, http.StatusOK, nil)
	d := time.Since(start)
	// Give the day's budget back so that any number of cycles fit.
	e.clk.Advance(24 * time.Hour)
	return d
}

// NoFaults is the Faults of a backend that cannot be made to fail on cue:
// the cycle benchmark's baseline, or a real service.
type NoFaults struct{}

func (NoFaults) LoseNextCreateReply()   {}
func (NoFaults) FailNextDeletes(int)    {}
func (NoFaults) RefuseCredentials(bool) {}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

var _ T = (*testing.B)(nil)
