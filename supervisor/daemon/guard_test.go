package daemon_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor/daemon"
)

// guarded is the fake provider with a host guard that cannot be installed,
// as on a host without iptables or root.
type guarded struct {
	*fake.Provider
}

var guardCalls atomic.Int64

func (guarded) GuardHost(context.Context, int) error {
	guardCalls.Add(1)
	return errors.New("iptables: permission denied")
}
func (guarded) RemoveStaleOpenings(context.Context) ([]int, error) { return nil, nil }
func (guarded) UnguardPort(context.Context, int) error             { return nil }
func (guarded) AllowTURN(context.Context, int) error               { return nil }
func (guarded) UnguardTURN(context.Context, int) error             { return nil }

func init() {
	providers.Register("guardfails", func(cfg providers.Config) (providers.Provider, error) {
		return guarded{fake.New(cfg.Get("FAKE_PROVIDER_DIR", ""), cfg.Logger)}, nil
	})
}

// TestHostGuardFailsClosed: a provider whose computers run on this host
// and whose guard cannot be installed stops the supervisor with a message
// that says why and what to do, egress on or off; --unguarded runs it
// anyway.
func TestHostGuardFailsClosed(t *testing.T) {
	for _, egressListen := range []string{"off", "127.0.0.1:0"} {
		o := daemon.Options{
			DataDir: t.TempDir(), Token: "guard-test-operator-token-0123456789",
			Providers: []string{"guardfails"}, DefaultProvider: "guardfails",
			Getenv: func(k string) string {
				if k == "FAKE_PROVIDER_DIR" {
					return t.TempDir()
				}
				return ""
			},
			Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
			Egress: daemon.EgressOptions{Listen: egressListen},
		}
		before := guardCalls.Load()
		d, err := daemon.New(testContext(t), o)
		if err == nil {
			d.Close()
			t.Fatalf("EGRESS_LISTEN=%s: the supervisor started with a host guard that failed", egressListen)
		}
		if !strings.Contains(err.Error(), "--unguarded") || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("EGRESS_LISTEN=%s: the refusal does not say why and what to do: %v", egressListen, err)
		}
		if guardCalls.Load() == before {
			t.Errorf("EGRESS_LISTEN=%s: the guard was never tried", egressListen)
		}

		o.Unguarded = true
		o.DataDir = t.TempDir()
		d, err = daemon.New(testContext(t), o)
		if err != nil {
			t.Fatalf("EGRESS_LISTEN=%s with --unguarded: %v", egressListen, err)
		}
		d.Close()
	}
}
