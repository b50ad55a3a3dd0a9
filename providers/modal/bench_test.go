package modal_test

import (
	"testing"

	"github.com/berthdev/berth/conformance/providertest"
)

// BenchmarkCycle times start, exec and stop through the supervisor on the
// fake Modal API against the same on providers/fake:
//
//	go test ./providers/modal -run '^$' -bench Cycle -benchtime 50x
func BenchmarkCycle(b *testing.B) { providertest.BenchmarkCycle(b, harness) }
