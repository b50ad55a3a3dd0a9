package railway

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func newTest(t testing.TB, f *fakeRailway, log *slog.Logger, image string) *Railway {
	r, err := New(Options{APIURL: f.srv.URL + "/graphql/v2", HeadlessImage: image, DomainScheme: "http", PollInterval: 2 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func spec(c map[string]string) providers.Spec {
	return providers.Spec{ComputerID: "c1", SessionID: "s_c1", AttemptID: "a_1", AgentID: "ag", Deployment: "d_1",
		TokenHash: strings.Repeat("ef", 32), Env: map[string]string{"TURN_PUBLIC_HOST": "turn.example", "HTTPS_PROXY": "http://c1:egress-secret@172.17.0.1:3128"}, Lease: 5 * time.Minute, Credentials: c}
}

// TestServiceAndTokens checks the service Railway is asked for and both
// token headers.
func TestServiceAndTokens(t *testing.T) {
	f := newFakeRailway(t)
	r := newTest(t, f, nil, "")
	for _, kind := range []string{"account", "project"} {
		s := spec(f.creds(kind))
		s.ComputerID = "c-" + kind
		m, err := r.Create(t.Context(), s)
		if err != nil {
			t.Fatalf("%s token: %v", kind, err)
		}
		if kind == "project" && (f.headers.Get("Project-Access-Token") != f.Token || f.headers.Get("Authorization") != "") {
			t.Errorf("project token headers: %v", f.headers)
		}
		if kind == "account" && f.headers.Get("Authorization") != "Bearer "+f.Token {
			t.Errorf("account token headers: %v", f.headers)
		}
		in := f.lastCreate
		src, _ := in["source"].(map[string]any)
		vars, _ := in["variables"].(map[string]any)
		if src["image"] != DefaultHeadlessImage || in["name"] != Name(s.ComputerID) || vars["BERTH_TOKEN_SHA256"] != strings.Repeat("ef", 32) || vars["TURN_PUBLIC_HOST"] != "turn.example" {
			t.Errorf("serviceCreate input %v", in)
		}
		// The lease's end, plus a minute, for computerd to end the
		// computer by itself; and no restarts after that.
		expires, err := time.Parse(time.RFC3339, fmt.Sprint(vars[computerd.EnvExpiresAt]))
		if want := time.Now().Add(s.Lease + time.Minute); err != nil || expires.Before(want.Add(-time.Minute)) || expires.After(want.Add(time.Second)) {
			t.Errorf("%s = %v (%v), want about %v", computerd.EnvExpiresAt, vars[computerd.EnvExpiresAt], err, want)
		}
		f.mu.Lock()
		policy := f.services[m.ID].restartPolicy
		f.mu.Unlock()
		if policy != "NEVER" {
			t.Errorf("restart policy %q, want NEVER", policy)
		}
		for k, v := range vars {
			if v == f.Token {
				t.Errorf("the token is in variable %s", k)
			}
			if strings.Contains(strings.ToUpper(k), "PROXY") {
				t.Errorf("a hosted computer got the supervisor's egress proxy: %s", k)
			}
		}
		ctx := providers.WithCredentials(t.Context(), f.creds(kind))
		ms, err := r.List(ctx)
		if err != nil || len(ms) != 1 || ms[0].ID != m.ID || ms[0].Endpoint != m.Endpoint || ms[0].Labels[providers.LabelAttempt] != "a_1" {
			t.Errorf("List = %+v, %v", ms, err)
		}
		if err := r.Destroy(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		if err := r.Destroy(ctx, m.ID); err != nil {
			t.Errorf("destroy of a gone service: %v", err)
		}
	}
}

// TestErrors maps Railway's answers.
func TestErrors(t *testing.T) {
	f := newFakeRailway(t)
	r := newTest(t, f, nil, "")
	bad := f.creds("team")
	bad[CredToken] = "wrong-token-value"
	if _, err := r.Create(t.Context(), spec(bad)); !errors.Is(err, providers.ErrBadCredentials) || strings.Contains(err.Error(), "wrong-token-value") {
		t.Errorf("bad token: %v", err)
	}
	f.mu.Lock()
	f.rateLimit = 1
	f.mu.Unlock()
	if _, err := r.Create(t.Context(), spec(f.creds(""))); !errors.Is(err, providers.ErrCapacity) {
		t.Errorf("429: %v", err)
	}
	// A failed deployment is a bad image, and its service is deleted, as
	// the supervisor takes the failure to mean nothing was left behind.
	if _, err := newTest(t, f, nil, "missing:1").Create(t.Context(), spec(f.creds(""))); !errors.Is(err, providers.ErrBadImage) || !strings.Contains(err.Error(), "missing:1") {
		t.Errorf("failed deployment: %v, want a missing image naming it", err)
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d services left after a failed deployment", n)
	}
	// A project that is not there is the connection's mistake: a definite
	// 422 that names the credentials to check, not an outage.
	wrong := f.creds("")
	wrong[CredProjectID] = "prj-typo"
	_, err := r.Create(t.Context(), spec(wrong))
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Status != 422 || !strings.Contains(re.Message, CredProjectID) || strings.Contains(re.Message, f.Token) {
		t.Errorf("unknown project: %v, want a 422 refusal naming %s", err, CredProjectID)
	}
	for _, c := range []map[string]string{{CredToken: "t"}, {CredToken: "t", CredProjectID: "p", CredEnvironmentID: "e", CredTokenKind: "root"}, {"apiKey": "x"}} {
		if err := r.CheckCredentials(c); err == nil {
			t.Errorf("CheckCredentials(%v) passed", c)
		}
	}
}

// TestConformance runs the providers' conformance suite against the fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		ID: ID,
		New: func(pt providertest.T, log *slog.Logger) providertest.Target {
			f := newFakeRailway(pt.(*testing.T))
			return providertest.Target{Provider: newTest(pt.(*testing.T), f, log, ""), Credentials: f.creds("project"), Faults: f, Exists: f.exists}
		},
	})
}
