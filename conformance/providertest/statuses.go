package providertest

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
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

// CheckCreated checks what a hosted machine of spec was made with, as its
// backend holds it: every one of Berth's labels (as labels, metadata or
// tags), the computer's variables but for the egress proxy's, which a
// hosted machine cannot use, the token hash computerd starts with, and no
// credential of the connection.
func CheckCreated(t T, spec providers.Spec, labels, env map[string]string) {
	t.Helper()
	for k, v := range spec.Labels() {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	hosted := providers.HostedEnv(spec.Env)
	for k, v := range spec.Env {
		_, kept := hosted[k]
		if got, ok := env[k]; kept && got != v {
			t.Errorf("variable %s = %q, want %q", k, got, v)
		} else if !kept && ok {
			t.Errorf("variable %s is set: a hosted machine cannot use the egress proxy", k)
		}
	}
	if env[computerd.EnvTokenHash] != spec.TokenHash {
		t.Errorf("variable %s = %q, want the token hash %q", computerd.EnvTokenHash, env[computerd.EnvTokenHash], spec.TokenHash)
	}
	for name, c := range spec.Credentials {
		for k, v := range env {
			if c != "" && strings.Contains(v, c) {
				t.Errorf("variable %s holds the credential %s", k, name)
			}
		}
	}
}

// CreateOne creates a machine of spec with p on an empty backend and
// returns it with the one machine the backend then holds (all lists
// them), failing the test otherwise.
func CreateOne[S any](t T, p providers.Provider, spec providers.Spec, all func() []S) (providers.Machine, S) {
	t.Helper()
	m, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	held := all()
	if len(held) != 1 {
		t.Fatalf("the backend holds %d machines after one create, want 1", len(held))
	}
	return m, held[0]
}

// HostedSpec is the spec of the one computer a hosted provider's test
// creates: computer c1 of agent ag, session s_c1, attempt a_1, deployment
// d_1, computerd's token "tok", with creds. A test sets the image,
// environment and lease it checks.
func HostedSpec(creds map[string]string) providers.Spec {
	return providers.Spec{
		ComputerID: "c1", SessionID: "s_c1", AttemptID: "a_1", AgentID: "ag", Deployment: "d_1",
		TokenHash: token.Hash("tok"), Credentials: creds,
	}
}

// DestroyTwice destroys machine id through p with creds, failing t on an
// error, and then again: a destroy of a machine already gone is no error.
func DestroyTwice(t T, p providers.Provider, creds map[string]string, id string) {
	t.Helper()
	ctx := providers.WithCredentials(t.Context(), creds)
	if err := p.Destroy(ctx, id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if err := p.Destroy(ctx, id); err != nil {
		t.Errorf("destroy of a machine already gone: %v, want nil", err)
	}
}

// IdleClosed returns tr, its idle connections closed when t ends.
func IdleClosed(t T, tr *http.Transport) *http.Transport {
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}
