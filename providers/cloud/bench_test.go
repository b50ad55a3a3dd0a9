package cloud_test

import (
	"log/slog"
	"testing"

	"github.com/berthdev/berth/providers/cloud"
	"github.com/berthdev/berth/providers/providertest"
)

// BenchmarkCycle times start, exec and stop through the supervisor on a
// second, in-process supervisor (whose computers are providers/fake's)
// against the same on providers/fake directly:
//
//	go test ./providers/cloud -run '^$' -bench Cycle -benchtime 50x
func BenchmarkCycle(b *testing.B) {
	providertest.BenchmarkCycle(b, providertest.Harness{ID: cloud.ID, New: func(t providertest.T, log *slog.Logger) providertest.Target {
		r := newRemote(t)
		return providertest.Target{Provider: newProvider(t, log),
			Credentials: map[string]string{cloud.CredURL: r.URL, cloud.CredAPIKey: r.token},
			Faults:      r.Server, Exists: r.exists}
	}})
}
