package cloud_test

import (
	"testing"

	"github.com/berthdev/berth/conformance/providertest"
)

// BenchmarkCycle times start, exec and stop through the supervisor on a
// second, in-process supervisor (whose computers are providers/fake's)
// against the same on providers/fake directly:
//
//	go test ./providers/cloud -run '^$' -bench Cycle -benchtime 50x
func BenchmarkCycle(b *testing.B) { providertest.BenchmarkCycle(b, harness) }
