package cloud_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/cloud"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/providers/internal/fakeapi"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// remote is a second, real supervisor (service, REST API, SQLite store,
// providers/fake machines) behind the fault injection of fakeapi.
type remote struct {
	*fakeapi.Server
	token string
	svc   *supervisor.Service
	st    store.Store
	fake  *fake.Provider
}

func newRemote(t providertest.T) *remote {
	dir := t.TempDir()
	parts := supervisortest.NewParts(t, dir)
	st, box, tokens := parts.Store, parts.Box, parts.Tokens
	fp := fake.New(filepath.Join(dir, "machines"), nil)
	hc := &http.Client{Transport: &http.Transport{}}
	svc, err := supervisor.New(supervisor.Config{
		Store: st, Providers: map[string]providers.Provider{fake.ID: fp}, DefaultProvider: fake.ID,
		Box: box, Tokens: tokens, HTTPClient: hc, ReadyTimeout: 10 * time.Second,
		// The remote supervisor sets its computers' environment; the
		// suite looks for this marker in it.
		ComputerEnv: map[string]string{"BERTH_CONFORMANCE": "1"},
	})
	if err != nil {
		t.Fatalf("remote supervisor: %v", err)
	}
	r := &remote{token: "remote-operator-" + time.Now().Format("150405.000000000"), svc: svc, st: st, fake: fp}
	r.Server = fakeapi.New(t, apiserver.New(svc, r.token, nil), fakeapi.Options{
		Kind: func(req *http.Request) fakeapi.Kind {
			switch {
			case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/computer/start"):
				return fakeapi.Create
			case req.Method == http.MethodDelete && strings.HasSuffix(req.URL.Path, "/computer"):
				return fakeapi.Delete
			}
			return fakeapi.Other
		},
		WriteError: func(w http.ResponseWriter, status int, msg string) {
			code := map[int]string{401: "unauthorized", 503: "provider_unavailable"}[status]
			if code == "" {
				code = "internal"
			}
			fakeapi.WriteJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
		},
	})
	t.Cleanup(func() {
		fp.Close()
		hc.CloseIdleConnections()
		st.Close()
	})
	return r
}

// exists reports whether the remote holds a live computer whose local
// labels match: the agent id carries deployment, session and attempt, the
// remote agent's name the local agent.
func (r *remote) exists(ctx context.Context, label, value string) (bool, error) {
	cs, err := r.svc.Computers(ctx)
	if err != nil {
		return false, err
	}
	for _, c := range cs {
		if c.Session == nil || !store.Live(c.Session.State) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(c.Agent, "b."), ".")
		if len(parts) != 3 {
			continue
		}
		a, err := r.st.GetAgent(ctx, c.Agent)
		if err != nil {
			return false, err
		}
		switch {
		case label == providers.LabelDeployment && parts[0] == value,
			label == providers.LabelSession && parts[1] == value,
			label == providers.LabelAttempt && parts[2] == value,
			label == providers.LabelAgent && a.Name == "berth agent "+value:
			return true, nil
		}
	}
	return false, nil
}

func newProvider(t providertest.T, log *slog.Logger) *cloud.Cloud {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return cloud.New(cloud.Options{Transport: tr, Logger: log})
}

// TestConformance runs the provider suite against a real second
// supervisor.
func TestConformance(t *testing.T) { providertest.Run(t, harness) }

// harness builds the provider on a fresh second supervisor for each scenario of the
// conformance suite and for the cycle benchmark.
var harness = providertest.Harness{
	ID: cloud.ID,
	New: func(t providertest.T, log *slog.Logger) providertest.Target {
		r := newRemote(t)
		return providertest.Target{
			Provider:    newProvider(t, log),
			Credentials: map[string]string{cloud.CredURL: r.URL, cloud.CredAPIKey: r.token, cloud.CredWorkspace: "billed"},
			Secrets:     []string{r.token},
			Faults:      r.Server,
			Exists:      r.exists,
		}
	},
}

func testSpec(r *remote) providers.Spec {
	return providers.Spec{
		ComputerID: "abc", SessionID: "s_abc", AttemptID: "a_1", Deployment: "d_1", AgentID: "local",
		Image: providers.ImageHeadless, Lease: 5 * time.Minute,
		Credentials: map[string]string{cloud.CredURL: r.URL, cloud.CredAPIKey: r.token, cloud.CredWorkspace: "billed"},
	}
}

// TestBilledRemotely checks that the computer, its lease and its usage
// live in the remote workspace, and that live view and terminals are
// refused.
func TestBilledRemotely(t *testing.T) {
	r := newRemote(t)
	p := newProvider(t, nil)
	spec := testSpec(r)
	m, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.st.GetAgent(t.Context(), m.ID)
	if err != nil || a.Workspace != "billed" {
		t.Fatalf("remote agent %+v %v: want workspace billed", a, err)
	}
	c, err := r.st.GetConnection(t.Context(), m.ID)
	if err != nil || c.LeaseSeconds != 300 {
		t.Fatalf("remote connection %+v %v: want the 300 s lease", c, err)
	}
	tr := p.Transport(m, spec.Credentials)
	for _, path := range []string{"/v1/exec/stream", "/v1/desktop", "/v1/screenshot"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, m.Endpoint+path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s: %d, want 501", path, resp.StatusCode)
		}
	}
	ctx := providers.WithCredentials(t.Context(), spec.Credentials)
	if err := p.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	u, err := r.svc.Usage(t.Context(), "workspace", time.Time{}, time.Time{})
	if err != nil || len(u.Rows) != 1 || u.Rows[0].Key != "billed" {
		t.Errorf("remote usage %+v %v: want one row for workspace billed", u.Rows, err)
	}
	if err := p.Destroy(ctx, m.ID); err != nil {
		t.Errorf("destroy twice: %v", err)
	}
}

// TestLostStartReplyRetried checks that a start whose reply was lost is
// retried with the same idempotency key and makes one computer.
func TestLostStartReplyRetried(t *testing.T) {
	r := newRemote(t)
	p := newProvider(t, nil)
	r.LoseNextCreateReply()
	if _, err := p.Create(t.Context(), testSpec(r)); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.fake.Counts(); c != 1 {
		t.Errorf("remote creates: %d, want 1", c)
	}
	starts := r.Count(func(q fakeapi.Request) bool { return strings.HasSuffix(q.Path, "/computer/start") })
	if starts != 2 {
		t.Errorf("start requests: %d, want 2 (the lost one and its retry)", starts)
	}
}

func TestErrors(t *testing.T) {
	r := newRemote(t)
	p := newProvider(t, nil)
	spec := testSpec(r)
	spec.Credentials = map[string]string{cloud.CredURL: r.URL, cloud.CredAPIKey: "wrong-key"}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrBadCredentials) || strings.Contains(err.Error(), "wrong-key") {
		t.Errorf("wrong key: %v", err)
	}
	if err := p.CheckCredentials(map[string]string{"url": "ftp://x", "apiKey": "k"}); err == nil || !strings.Contains(err.Error(), "url") {
		t.Errorf("bad url: %v", err)
	}
	if err := p.CheckCredentials(map[string]string{"url": "https://x", "apiKey": "k", "token": "t"}); err == nil {
		t.Error("unknown credential accepted")
	}
	// A start the remote refuses for sure is refused here too, with its
	// reason, and leaves no connection there.
	r.fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: &providers.RefusedError{Status: http.StatusUnprocessableEntity, Code: "over_limit", Message: "over the owner's limit"}})
	spec = testSpec(r)
	_, err := p.Create(t.Context(), spec)
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Status != http.StatusUnprocessableEntity || !strings.Contains(re.Message, "over the owner's limit") {
		t.Errorf("refused remote start: %#v, want a definite 422 with the remote's reason", err)
	}
	if cs, err := r.svc.Computers(t.Context()); err != nil || len(cs) != 0 {
		t.Errorf("after a refused start the remote holds %+v (%v), want no connection", cs, err)
	}
	down := newRemote(t)
	spec = testSpec(down)
	down.Close()
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("remote down: %v", err)
	}
}
