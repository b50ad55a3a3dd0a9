// Package e2bfake is a local fake of the E2B API, for tests of the e2b and
// novita providers. It follows E2B's documented REST API: the OpenAPI file
// spec/openapi.yml of github.com/e2b-dev/E2B (commit b8029973, August 2026)
// and https://e2b.dev/docs/api-reference:
//
//   - POST /sandboxes {templateID, timeout, autoPause, metadata, envVars,
//     network.allowPublicTraffic} answers 201 with {sandboxID, templateID,
//     clientID, envdVersion, trafficAccessToken, domain};
//   - GET /v2/sandboxes?metadata=k%3Dv&state=running,paused&limit=&nextToken=
//     answers 200 with ListedSandbox items and an X-Next-Token header;
//   - DELETE /sandboxes/{sandboxID} answers 204, 404 when it is unknown;
//   - POST /sandboxes/{sandboxID}/connect {timeout} answers 200 with the
//     sandbox (the TTL is only ever extended);
//   - every call needs X-API-Key; errors are {"code": <status>, "message"}
//     with 400, 401, 404, 429 or 500.
//
// A sandbox's port URL https://<port>-<sandboxID>.<domain> is served by a
// second listener (see Transport): it forwards port 7070 to the sandbox's
// computerd, a real one running in-process (fakeapi.StartComputer) with
// the sandbox's envVars as its environment and the token hash from
// BERTH_TOKEN_SHA256, as the template's start command would run it. With
// allowPublicTraffic false it refuses requests without the sandbox's
// e2b-traffic-access-token, as E2B's proxy does.
//
// The bad days: refused keys (401), 429 and 5xx on demand, a create whose
// reply is lost after the sandbox was made, and deletes that fail
// (fakeapi.Server).
package e2bfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers/internal/fakeapi"
)

// Domain is the sandbox domain the fake answers with.
const Domain = "e2b.test"

// T is what the fake needs from a test.
type T = fakeapi.T

// Sandbox is a sandbox the fake holds.
type Sandbox struct {
	ID         string
	TemplateID string
	Timeout    int
	Metadata   map[string]string
	EnvVars    map[string]string
	Public     bool
	Token      string
	StartedAt  time.Time
	EndAt      time.Time
	computer   *fakeapi.Computer
}

// Fake is a running fake E2B.
type Fake struct {
	*fakeapi.Server
	// Key is the API key the fake accepts.
	Key string
	// Templates are the template ids it knows.
	Templates map[string]bool

	edge      *fakeapi.Edge
	dir       string
	sandboxes *fakeapi.Fleet[Sandbox]
	pageSize  atomic.Int32
}

// New starts a fake E2B that accepts key and knows templates; both
// servers and every sandbox go when the test ends.
func New(t T, key string, templates ...string) *Fake {
	f := &Fake{Key: key, Templates: map[string]bool{}, dir: t.TempDir(), sandboxes: fakeapi.NewFleet(t,
		func(s *Sandbox) *fakeapi.Computer { return s.computer },
		func(s *Sandbox) map[string]string { return s.Metadata })}
	f.pageSize.Store(100)
	for _, tpl := range templates {
		f.Templates[tpl] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", f.create)
	mux.HandleFunc("GET /v2/sandboxes", f.list)
	mux.HandleFunc("GET /sandboxes/{id}", f.get)
	mux.HandleFunc("DELETE /sandboxes/{id}", f.kill)
	mux.HandleFunc("POST /sandboxes/{id}/connect", f.connect)
	f.Server = fakeapi.New(t, mux, fakeapi.Options{
		Authorized: func(r *http.Request) bool { return r.Header.Get("X-API-Key") == f.Key },
		Kind:       fakeapi.CreateAt("/sandboxes"),
		WriteError: writeError,
	})
	f.edge = fakeapi.NewEdge(t, Domain, f.route)
	return f
}

// Transport sends requests for the fake's sandbox domain to its traffic
// listener and the rest normally; the provider under test uses it.
func (f *Fake) Transport() *http.Transport { return f.edge.Transport() }

// SetPageSize sets how many sandboxes a list page holds.
func (f *Fake) SetPageSize(n int) { f.pageSize.Store(int32(n)) }

// Sandboxes returns the sandboxes the fake holds, by id.
func (f *Fake) Sandboxes() []Sandbox { return f.sandboxes.All() }

// Exists reports whether a sandbox has metadata label=value.
func (f *Fake) Exists(label, value string) bool { return f.sandboxes.Exists(label, value) }

func writeError(w http.ResponseWriter, status int, msg string) {
	fakeapi.WriteJSON(w, status, map[string]any{"code": status, "message": msg})
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    *int              `json:"timeout"`
		AutoPause  bool              `json:"autoPause"`
		Metadata   map[string]string `json:"metadata"`
		EnvVars    map[string]string `json:"envVars"`
		Network    *struct {
			AllowPublicTraffic *bool `json:"allowPublicTraffic"`
		} `json:"network"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	if req.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	if !f.Templates[req.TemplateID] {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", req.TemplateID))
		return
	}
	timeout := 15
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout must be at least 0")
		return
	}
	public := true
	if req.Network != nil && req.Network.AllowPublicTraffic != nil {
		public = *req.Network.AllowPublicTraffic
	}
	c, err := fakeapi.StartComputer(f.dir, req.EnvVars[computerd.EnvTokenHash], req.EnvVars)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "sandbox failed to start")
		return
	}
	now := time.Now().UTC()
	s := &Sandbox{
		ID: "i" + fakeapi.RandomHex(10), TemplateID: req.TemplateID, Timeout: timeout,
		Metadata: req.Metadata, EnvVars: req.EnvVars, Public: public,
		Token: fakeapi.RandomHex(16), StartedAt: now, EndAt: now.Add(time.Duration(timeout) * time.Second), computer: c,
	}
	answer := f.answer(*s)
	f.sandboxes.Add(s.ID, s)
	fakeapi.WriteJSON(w, http.StatusCreated, answer)
}

func (f *Fake) answer(s Sandbox) map[string]any {
	a := map[string]any{
		"templateID": s.TemplateID, "sandboxID": s.ID, "clientID": "6532622b", "envdVersion": "0.2.0",
		"domain": Domain, "trafficAccessToken": nil,
	}
	if !s.Public {
		a["trafficAccessToken"] = s.Token
	}
	return a
}

func (f *Fake) listed(s Sandbox) map[string]any {
	return map[string]any{
		"templateID": s.TemplateID, "sandboxID": s.ID, "clientID": "6532622b", "envdVersion": "0.2.0",
		"startedAt": s.StartedAt.Format(time.RFC3339), "endAt": s.EndAt.Format(time.RFC3339),
		"cpuCount": 2, "memoryMB": 2048, "diskSizeMB": 10240, "state": "running", "metadata": s.Metadata,
	}
}

// list serves GET /v2/sandboxes: the metadata query is "k=v&k2=v2" with
// each key and value URL-encoded, pages are cut at limit and continued
// with nextToken.
func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	if m := r.URL.Query().Get("metadata"); m != "" {
		q, err := url.ParseQuery(m)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid metadata query")
			return
		}
		for k := range q {
			want[k] = q.Get(k)
		}
	}
	for _, st := range strings.Split(r.URL.Query().Get("state"), ",") {
		if st != "" && st != "running" && st != "paused" {
			writeError(w, http.StatusBadRequest, "invalid state "+st)
			return
		}
	}
	limit := int(f.pageSize.Load())
	if l, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && l > 0 && l < limit {
		limit = l
	}
	sbs := f.sandboxes.Matching(want)
	start := 0
	if next := r.URL.Query().Get("nextToken"); next != "" {
		start = sort.Search(len(sbs), func(i int) bool { return sbs[i].ID >= next })
	}
	items := []map[string]any{}
	for i := start; i < len(sbs) && len(items) < limit; i++ {
		items = append(items, f.listed(sbs[i]))
	}
	if start+limit < len(sbs) {
		w.Header().Set("X-Next-Token", sbs[start+limit].ID)
	}
	fakeapi.WriteJSON(w, http.StatusOK, items)
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	s, ok := f.sandboxes.Get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", r.PathValue("id")))
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, f.listed(s))
}

func (f *Fake) kill(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.sandboxes.Remove(r.PathValue("id")); !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", r.PathValue("id")))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) connect(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Timeout == nil || *req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout is required and at least 0")
		return
	}
	var s *Sandbox
	f.sandboxes.Do(r.PathValue("id"), func(m *Sandbox) bool {
		if m != nil {
			if end := time.Now().Add(time.Duration(*req.Timeout) * time.Second); end.After(m.EndAt) {
				m.EndAt = end
			}
			c := *m
			s = &c
		}
		return false
	})
	if s == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", r.PathValue("id")))
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, f.answer(*s))
}

// route serves https://<port>-<sandboxID>.<domain>: port 7070 of a known
// sandbox, with its traffic token unless it is public.
func (f *Fake) route(w http.ResponseWriter, r *http.Request, label string) string {
	port, id, ok := strings.Cut(label, "-")
	s, known := f.sandboxes.Get(id)
	switch {
	case !ok:
		http.Error(w, "unknown host", http.StatusBadGateway)
	case !known:
		http.Error(w, "The sandbox was not found", http.StatusBadGateway)
	case !s.Public && r.Header.Get("e2b-traffic-access-token") != s.Token:
		http.Error(w, "missing or wrong traffic access token", http.StatusForbidden)
	case port != strconv.Itoa(computerd.Port):
		http.Error(w, "The sandbox is running but port is not open", http.StatusBadGateway)
	default:
		return s.computer.URL
	}
	return ""
}
