package daytona_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/berthdev/berth/providers/daytona"
	"github.com/berthdev/berth/providers/providertest"
)

// BenchmarkCycle times start, exec and stop through the supervisor on the
// fake Daytona API (its asynchronous states polled every millisecond)
// against the same on providers/fake:
//
//	go test ./providers/daytona -run '^$' -bench Cycle -benchtime 50x
func BenchmarkCycle(b *testing.B) {
	providertest.BenchmarkCycle(b, providertest.Harness{ID: daytona.ID, New: func(t providertest.T, log *slog.Logger) providertest.Target {
		f, p, creds := newFake(t, log)
		return providertest.Target{Provider: p, Credentials: creds, Faults: f.Server,
			Exists: func(ctx context.Context, label, value string) (bool, error) { return f.Exists(label, value), nil }}
	}})
}
