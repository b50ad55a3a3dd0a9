package e2b_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/berthdev/berth/providers/e2b"
	"github.com/berthdev/berth/providers/providertest"
)

// BenchmarkCycle times start, exec and stop through the supervisor on the
// fake E2B API against the same on providers/fake:
//
//	go test ./providers/e2b -run '^$' -bench Cycle -benchtime 50x
func BenchmarkCycle(b *testing.B) {
	providertest.BenchmarkCycle(b, providertest.Harness{ID: e2b.ID, New: func(t providertest.T, log *slog.Logger) providertest.Target {
		f, p, key := newFake(t, log)
		return providertest.Target{Provider: p, Credentials: map[string]string{e2b.CredAPIKey: key}, Faults: f.Server,
			Exists: func(ctx context.Context, label, value string) (bool, error) { return f.Exists(label, value), nil }}
	}})
}
