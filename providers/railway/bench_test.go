package railway

import (
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/hostedtest"
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
	p, err := New(Options{Client: f.client(), DomainScheme: "http", PollInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	hostedtest.BenchComputerCycle(b, p, f.creds("project"))
}
