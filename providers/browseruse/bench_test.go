package browseruse

import (
	"testing"

	"github.com/berthdev/berth/conformance/browsertest"
)

// BenchmarkCycle times one browser session's whole life through the
// provider against its local fake API (create with a real headless
// Chromium behind it, one health check through the provider's transport,
// release) beside a bare launch and kill of the same Chromium in the same
// run, alternating which goes first; a browser session has no exec, so the
// browser's own start is the floor it is measured against. It reports the
// medians and the median of the paired ratios:
//
//	go test ./providers/browseruse -run '^$' -bench Cycle -benchtime 10x
func BenchmarkCycle(b *testing.B) {
	f := newFakeBrowserUse(b)
	p, err := New(Options{APIURL: f.srv.URL + "/api/v3"})
	if err != nil {
		b.Fatal(err)
	}
	browsertest.BenchCycle(b, p, map[string]string{CredAPIKey: f.Key})
}
