package e2b_test

import (
	"testing"

	"github.com/berthdev/berth/conformance/providertest"
)

// BenchmarkCycle times start, exec and stop through the supervisor on the
// fake E2B API against the same on providers/fake:
//
//	go test ./providers/e2b -run '^$' -bench Cycle -benchtime 50x
func BenchmarkCycle(b *testing.B) { providertest.BenchmarkCycle(b, harness) }
