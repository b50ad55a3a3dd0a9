package railway

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	r, err := New(Options{Client: f.client(), HeadlessImage: image, DomainScheme: "http", PollInterval: 2 * time.Millisecond, Logger: log})
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
		f.Mu.Lock()
		policy := f.services[m.ID].restartPolicy
		f.Mu.Unlock()
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
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if len(f.refused) > 0 {
		t.Errorf("Railway's schema refuses what the provider sent: %q", f.refused)
	}
	for _, h := range f.hosts {
		if h != apiHost {
			t.Errorf("a request went to %s, want %s", h, apiHost)
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
	f.Mu.Lock()
	f.RateLimit = 1
	f.Mu.Unlock()
	if _, err := r.Create(t.Context(), spec(f.creds(""))); !errors.Is(err, providers.ErrCapacity) {
		t.Errorf("429: %v", err)
	}
	// A failed deployment is a definite failure naming the image, and its
	// service is deleted, as the supervisor takes the failure to mean
	// nothing was left behind; Railway does not say the image is missing,
	// so neither does the provider.
	_, err := newTest(t, f, nil, "missing:1").Create(t.Context(), spec(f.creds("")))
	if re := (*providers.RefusedError)(nil); !errors.As(err, &re) || errors.Is(err, providers.ErrBadImage) || !strings.Contains(re.Message, "missing:1") || !strings.Contains(re.Message, "FAILED") {
		t.Errorf("failed deployment: %v, want a refusal naming the image and the status", err)
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d services left after a failed deployment", n)
	}
	// A project that is not there is the connection's mistake: a definite
	// 422 that names the credentials to check, not an outage.
	wrong := f.creds("")
	wrong[CredProjectID] = "prj-typo"
	_, err = r.Create(t.Context(), spec(wrong))
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

// TestAPIHost checks that the provider uses the API host Railway documents
// by default, and that the older host, which the fake refuses, fails
// clearly and makes nothing.
func TestAPIHost(t *testing.T) {
	if u, _ := url.Parse(DefaultAPIURL); u.Host != apiHost {
		t.Errorf("DefaultAPIURL %s, want the host %s", DefaultAPIURL, apiHost)
	}
	f := newFakeRailway(t)
	r, err := New(Options{APIURL: "https://" + oldAPIHost + "/graphql/v2", Client: f.client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(t.Context(), spec(f.creds(""))); !errors.Is(err, providers.ErrUnavailable) || !strings.Contains(err.Error(), SettingAPIURL) {
		t.Errorf("create through %s: %v, want an outage naming %s", oldAPIHost, err, SettingAPIURL)
	}
	f.Mu.Lock()
	hosts := f.hosts
	f.Mu.Unlock()
	if len(hosts) == 0 || hosts[0] != oldAPIHost || f.count() != 0 {
		t.Errorf("the fake saw %v and holds %d services, want one refused request to %s", hosts, f.count(), oldAPIHost)
	}
}

// TestSchemaRefusals sends requests Railway's schema does not allow: the
// fake refuses each with a 400, which the provider answers as a refusal
// carrying Railway's message.
func TestSchemaRefusals(t *testing.T) {
	f := newFakeRailway(t)
	r := newTest(t, f, nil, "")
	cr, err := credsOf(f.creds(""))
	if err != nil {
		t.Fatal(err)
	}
	input := func(extra map[string]any) map[string]any {
		in := map[string]any{"projectId": f.Project, "environmentId": f.Env, "name": "berth-c-x", "source": map[string]any{"image": "img"}, "variables": map[string]string{"A": "b"}}
		for k, v := range extra {
			in[k] = v
		}
		return map[string]any{"input": in}
	}
	for _, c := range []struct {
		name, query string
		vars        map[string]any
		want        string
	}{
		{"an input field the schema lacks", qServiceCreate, input(map[string]any{"image": "img"}), `"image" is not defined by type "ServiceCreateInput"`},
		{"a nested input field the schema lacks", qServiceCreate, input(map[string]any{"source": map[string]any{"image": "img", "tag": "1"}}), `"tag" is not defined by type "ServiceSourceInput"`},
		{"a missing required input field", qServiceCreate, map[string]any{"input": map[string]any{"name": "x"}}, `"projectId" of required type "String!"`},
		{"a variable that is not a string", qServiceCreate, input(map[string]any{"variables": map[string]any{"A": 1}}), "is not a string"},
		{"an enum value the schema lacks", qPolicy, map[string]any{"serviceId": "s", "environmentId": f.Env, "input": map[string]any{"restartPolicyType": "SOMETIMES"}}, `does not exist in "RestartPolicyType"`},
		{"a selected field the schema lacks", `mutation serviceCreate($input: ServiceCreateInput!) { serviceCreate(input: $input) { id label } }`, input(nil), `Cannot query field "label" on type "Service"`},
		{"an operation the schema lacks", `mutation serviceStart($id: String!) { serviceStart(id: $id) }`, map[string]any{"id": "s"}, `Cannot query field "serviceStart" on type "Mutation"`},
		{"an argument the schema lacks", `mutation serviceDelete($id: String!) { serviceDelete(id: $id, force: true) }`, map[string]any{"id": "s"}, `Unknown argument "force"`},
		{"a missing required argument", `mutation serviceInstanceDeploy($serviceId: String!) { serviceInstanceDeploy(serviceId: $serviceId) }`, map[string]any{"serviceId": "s"}, `argument "environmentId" of type "String!" is required`},
		{"a nullable variable where the schema wants one", `mutation serviceDelete($id: String) { serviceDelete(id: $id) }`, map[string]any{"id": "s"}, `used in position expecting type "String!"`},
		{"a variable of a type the schema lacks", `query project($id: ProjectId!) { project(id: $id) { services { edges { node { id } } } } }`, map[string]any{"id": "p"}, "not an input type"},
		{"a variable the document does not define", qVariables, map[string]any{"projectId": f.Project, "environmentId": f.Env, "service": "s"}, `"$service" is not defined`},
		{"an unused variable", `query project($id: String!, $env: String) { project(id: $id) { services { edges { node { id } } } } }`, map[string]any{"id": "p"}, `"$env" is never used`},
		{"a scalar with a selection", `query project($id: String!) { project(id: $id) { services { edges { node { id { value } } } } } }`, map[string]any{"id": "p"}, "must not have a selection"},
	} {
		err := r.gql(t.Context(), cr, c.query, c.vars, nil)
		var re *providers.RefusedError
		if !errors.As(err, &re) || !strings.Contains(re.Message, c.want) {
			t.Errorf("%s: %v, want a refusal saying %s", c.name, err, c.want)
		}
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d services made by refused requests", n)
	}
	// Every document the provider sends is one the schema takes.
	for _, q := range []string{qServiceCreate, qPolicy, qDeploy, qDeployments, qDomainCreate, qServiceDelete, qServices, qVariables} {
		d, err := parseGQL(q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		used := map[string]bool{}
		root := map[string]string{"query": "Query", "mutation": "Mutation"}[d.kind]
		if err := checkSelections(root, d.sel, d.vars, used); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// TestValidationAt200 checks that a schema refusal answered with status
// 200, as GraphQL servers may, is a refusal with Railway's message too.
func TestValidationAt200(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"errors": [{"message": "Field \"tag\" is not defined by type \"ServiceSourceInput\"", "extensions": {"code": "BAD_USER_INPUT"}}]}`)
	}))
	defer srv.Close()
	r, err := New(Options{APIURL: srv.URL + "/graphql/v2"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Create(t.Context(), spec(map[string]string{CredToken: "token-0123456789", CredProjectID: "p", CredEnvironmentID: "e"}))
	var re *providers.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Message, `"tag" is not defined`) {
		t.Errorf("a validation error at 200: %v, want a refusal with Railway's message", err)
	}
}
