package railway

// fakeRailway is a local Railway GraphQL API for the provider's tests,
// following Railway's public API documentation
// (https://docs.railway.com/integrations/api, its API cookbook
// https://docs.railway.com/integrations/api/api-cookbook and the guides
// "Manage Services", "Manage Deployments", "Manage Variables") and its
// published schema (fakeschema_test.go, which every request is checked
// against): one endpoint, POST https://backboard.railway.com/graphql/v2,
// with account and team tokens as a bearer token and project tokens in
// Project-Access-Token; serviceCreate(input: {projectId, environmentId,
// name, source: {image}, variables}), serviceInstanceUpdate(serviceId,
// environmentId, input: {restartPolicyType}), serviceInstanceDeploy(
// serviceId, environmentId), deployments(first, input: {serviceId,
// environmentId}) with statuses BUILDING, DEPLOYING, SUCCESS, FAILED,
// serviceDomainCreate(input: {serviceId, environmentId, targetPort}),
// serviceDelete(id, environmentId), project(id) {services}, and
// variables(projectId, environmentId, serviceId). Errors come as
// {"errors": [{"message", "extensions": {"code"}}]}: status 200 for what
// the API decides ("Not Authorized"), 400 for a document or variables the
// schema refuses (as GraphQL servers answer them), 429 for rate limits.
// The fake dispatches on the root field of each document.
//
// It listens with TLS and is reached through client(), which dials it
// for Railway's API hosts, so that the provider's tests use its default
// URL. A request for the older host backboard.railway.app is answered 404:
// Berth's default is the host Railway's documentation and CLI use.
//
// A deployment is a real in-process computerd (providers/fake) with the
// service's variables as its environment; its domain is its loopback
// address. Bad days: "Not Authorized" while tokens are refused, 429 on the
// next create, a create whose reply is lost after the service was made,
// deletes that fail with "Problem processing request".

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
)

type fakeRailway struct {
	t       testing.TB
	srv     *httptest.Server
	Token   string
	Project string
	Env     string
	vms     *fake.Provider

	hostedtest.Faults
	services   map[string]*fakeService
	lastCreate map[string]any
	headers    http.Header
	hosts      []string // the Host of each request
	refused    []string // the messages of requests the schema refused
}

type fakeService struct {
	id, name, image, domain string
	vars                    map[string]string
	status                  string
	polls                   int
	restartPolicy           string // ON_FAILURE until set, as on Railway
}

// The API's hosts: the one Railway documents, and the older one.
const (
	apiHost    = "backboard.railway.com"
	oldAPIHost = "backboard.railway.app"
)

func newFakeRailway(t testing.TB) *fakeRailway {
	f := &fakeRailway{t: t, Token: strings.ToLower(rand.Text()), Project: "prj-" + rand.Text()[:6], Env: "env-" + rand.Text()[:6],
		vms: fake.New(t.TempDir(), nil), services: map[string]*fakeService{}}
	f.srv = httptest.NewTLSServer(f)
	t.Cleanup(func() { f.srv.Close(); f.vms.Close() })
	return f
}

// client returns an HTTP client that reaches the fake for Railway's API
// hosts (trusting its certificate) and dials anything else as usual.
func (f *fakeRailway) client() *http.Client {
	tr := f.srv.Client().Transport.(*http.Transport).Clone()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == apiHost+":443" || addr == oldAPIHost+":443" {
			addr = f.srv.Listener.Addr().String()
		}
		return d.DialContext(ctx, network, addr)
	}
	tr.TLSClientConfig.ServerName = "example.com" // a name of httptest's certificate
	return &http.Client{Transport: tr}
}

func (f *fakeRailway) creds(kind string) map[string]string {
	return map[string]string{CredToken: f.Token, CredProjectID: f.Project, CredEnvironmentID: f.Env, CredTokenKind: kind}
}

func (f *fakeRailway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.headers = r.Header.Clone()
	f.hosts = append(f.hosts, r.Host)
	w.Header().Set("Content-Type", "application/json")
	if r.Host != apiHost || r.Method != "POST" || r.URL.Path != "/graphql/v2" {
		w.WriteHeader(404)
		json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"message": "the fake serves POST https://" + apiHost + "/graphql/v2 only"}}})
		return
	}
	var req struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(400)
		return
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		tok = r.Header.Get("Project-Access-Token")
	}
	if f.Refuse || tok != f.Token {
		f.errors(w, "Not Authorized")
		return
	}
	doc, gerr := checkRequest(req.Query, req.Variables)
	if gerr == nil && len(doc.sel) != 1 {
		gerr = invalid("the fake serves one root field a request")
	}
	if gerr != nil {
		f.refused = append(f.refused, gerr.msg)
		w.WriteHeader(400)
		json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]any{{"message": gerr.msg, "extensions": map[string]string{"code": gerr.code}}}})
		return
	}
	v := req.Variables
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	switch root := doc.sel[0].name; root {
	case "serviceCreate":
		in, _ := v["input"].(map[string]any)
		f.lastCreate = in
		if hostedtest.Take(&f.RateLimit) {
			w.WriteHeader(429)
			json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"message": "Rate limit exceeded"}}})
			return
		}
		if str(in, "projectId") != f.Project || str(in, "environmentId") != f.Env {
			f.errors(w, "Project not found")
			return
		}
		src, _ := in["source"].(map[string]any)
		s := &fakeService{id: "svc-" + strings.ToLower(rand.Text()[:10]), name: str(in, "name"), image: str(src, "image"), vars: map[string]string{}, restartPolicy: "ON_FAILURE"}
		if vars, ok := in["variables"].(map[string]any); ok {
			for k, x := range vars {
				s.vars[k], _ = x.(string)
			}
		}
		f.services[s.id] = s
		if hostedtest.Take(&f.LoseReplies) {
			hostedtest.HangUp(w)
			return
		}
		f.data(w, map[string]any{"serviceCreate": map[string]any{"id": s.id, "name": s.name}})
	case "serviceInstanceUpdate":
		s := f.services[str(v, "serviceId")]
		if s == nil || str(v, "environmentId") != f.Env {
			f.errors(w, "Service not found")
			return
		}
		in, _ := v["input"].(map[string]any)
		if p := str(in, "restartPolicyType"); p != "" {
			s.restartPolicy = p
		}
		f.data(w, map[string]any{"serviceInstanceUpdate": true})
	case "serviceInstanceDeploy":
		s := f.services[str(v, "serviceId")]
		if s == nil {
			f.errors(w, "Service not found")
			return
		}
		s.status, s.polls = "BUILDING", 0
		f.data(w, map[string]any{"serviceInstanceDeploy": true})
	case "deployments":
		in, _ := v["input"].(map[string]any)
		s := f.services[str(in, "serviceId")]
		if s == nil {
			f.data(w, map[string]any{"deployments": map[string]any{"edges": []any{}}})
			return
		}
		if s.polls++; s.status != "SUCCESS" && s.polls >= 2 {
			f.deploy(s)
		}
		f.data(w, map[string]any{"deployments": map[string]any{"edges": []any{map[string]any{"node": map[string]any{"id": "dep-" + s.id, "status": s.status}}}}})
	case "serviceDomainCreate":
		in, _ := v["input"].(map[string]any)
		s := f.services[str(in, "serviceId")]
		if s == nil || s.status != "SUCCESS" {
			f.errors(w, "Service not found")
			return
		}
		if port, _ := in["targetPort"].(float64); int(port) != computerd.Port {
			f.errors(w, "the fake serves computerd's port only")
			return
		}
		f.data(w, map[string]any{"serviceDomainCreate": map[string]any{"id": "dom-" + s.id, "domain": s.domain}})
	case "serviceDelete":
		s := f.services[str(v, "id")]
		if s == nil {
			f.errors(w, "Service not found")
			return
		}
		if hostedtest.Take(&f.FailDeletes) {
			f.errors(w, "Problem processing request")
			return
		}
		f.vms.Destroy(context.Background(), "fake-"+s.id)
		delete(f.services, s.id)
		f.data(w, map[string]any{"serviceDelete": true})
	case "project":
		if str(v, "id") != f.Project {
			f.errors(w, "Project not found")
			return
		}
		edges := []any{}
		for _, s := range f.services {
			doms := []any{}
			if s.domain != "" {
				doms = append(doms, map[string]any{"domain": s.domain})
			}
			edges = append(edges, map[string]any{"node": map[string]any{"id": s.id, "name": s.name, "serviceInstances": map[string]any{"edges": []any{
				map[string]any{"node": map[string]any{"environmentId": f.Env, "domains": map[string]any{"serviceDomains": doms}}}}}}})
		}
		f.data(w, map[string]any{"project": map[string]any{"services": map[string]any{"edges": edges}}})
	case "variables":
		s := f.services[str(v, "serviceId")]
		if s == nil {
			f.errors(w, "Service not found")
			return
		}
		f.data(w, map[string]any{"variables": s.vars})
	default:
		f.errors(w, "the fake does not serve "+root)
	}
}

// deploy starts the service's computerd.
func (f *fakeRailway) deploy(s *fakeService) {
	if strings.Contains(s.image, "missing") {
		s.status = "FAILED"
		return
	}
	env := map[string]string{}
	for k, v := range s.vars {
		if k != computerd.EnvTokenHash && k != computerd.EnvComputerID {
			env[k] = v
		}
	}
	m, err := f.vms.Create(context.Background(), providers.Spec{ComputerID: s.id, TokenHash: s.vars[computerd.EnvTokenHash], Env: env})
	if err != nil {
		s.status = "CRASHED"
		return
	}
	s.domain = strings.TrimPrefix(m.Endpoint, "http://")
	s.status = "SUCCESS"
}

func (f *fakeRailway) errors(w http.ResponseWriter, msg string) {
	json.NewEncoder(w).Encode(map[string]any{"data": nil, "errors": []map[string]string{{"message": msg}}})
}

func (f *fakeRailway) data(w http.ResponseWriter, d any) {
	json.NewEncoder(w).Encode(map[string]any{"data": d})
}

// count returns how many services the project has.
func (f *fakeRailway) count() int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return len(f.services)
}

func (f *fakeRailway) exists(ctx context.Context, label, value string) (bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, s := range f.services {
		var l map[string]string
		json.Unmarshal([]byte(s.vars[VarLabels]), &l)
		if l[label] == value {
			return true, nil
		}
	}
	return false, nil
}
