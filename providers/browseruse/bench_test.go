package browseruse

import (
	"testing"

	"github.com/berthdev/berth/conformance/browsertest"
)

// BenchmarkCycle times one browser session's whole life through the
// provider against its local fake API beside a bare launch and kill of the
// same Chromium (see browsertest.BenchCycle):
//
//	go test ./providers/browseruse -run '^$' -bench Cycle -benchtime 10x
func BenchmarkCycle(b *testing.B) {
	f := newFakeBrowserUse(b)
	browsertest.BenchCycle(b, newProvider(b, f, Options{}), map[string]string{CredAPIKey: f.Key})
}
