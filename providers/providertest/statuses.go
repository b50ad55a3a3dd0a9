package providertest

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/berthdev/berth/providers"
)

// Statuses is a backend that answers its next requests with the given
// HTTP statuses, as the fake APIs of hosted providers do
// (fakeapi.Server.FailNext).
type Statuses interface {
	FailNext(statuses ...int)
}

// statusErrors are the bad-day answers of a hosted API and what a
// provider's error must mean for each.
var statusErrors = []struct {
	status int
	want   error
}{
	{http.StatusTooManyRequests, providers.ErrCapacity},
	{http.StatusInternalServerError, providers.ErrUnavailable},
	{http.StatusBadGateway, providers.ErrUnavailable},
	{http.StatusServiceUnavailable, providers.ErrUnavailable},
	{http.StatusUnauthorized, providers.ErrBadCredentials},
}

// CheckStatuses has the backend answer each bad-day status (429, 500,
// 502, 503, 401) to the first request of call, and checks that call's
// error means what the status does (no room, an outage, a refused key)
// and holds none of secrets.
func CheckStatuses(t T, b Statuses, call func() error, secrets ...string) {
	t.Helper()
	for _, c := range statusErrors {
		b.FailNext(c.status)
		err := call()
		if !errors.Is(err, c.want) {
			t.Errorf("the API answered %d: %v, want %v", c.status, err, c.want)
			continue
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(err.Error(), s) {
				t.Errorf("the API answered %d: the error %q holds a secret", c.status, err)
			}
		}
	}
}

// ExistsFunc adapts a fake backend's Exists to Target.Exists.
func ExistsFunc(exists func(label, value string) bool) func(ctx context.Context, label, value string) (bool, error) {
	return func(_ context.Context, label, value string) (bool, error) { return exists(label, value), nil }
}
