// Package e2bfake is a local fake of the E2B API, for tests of the e2b and
// novita providers. It holds every request to E2B's published contract,
// the OpenAPI file spec/openapi.yml of github.com/e2b-dev/E2B (commit
// b8029973aa7d, August 2026), and to the rules E2B's API server enforces
// beyond it, read from github.com/e2b-dev/infra (commit 54693ff353d2,
// August 2026); contract.go cites each one. A request that breaks them is
// answered as the API answers it, so a client that passes the fake sends
// what E2B accepts.
//
//   - POST /sandboxes, NewSandbox {templateID, timeout, autoPause, secure,
//     allow_internet_access, metadata, envVars, network.allowPublicTraffic,
//     ...} answers 201 with {sandboxID, templateID, clientID, envdVersion,
//     envdAccessToken, trafficAccessToken, domain}; 400 for a body the
//     document refuses, a template reference that is not valid, a timeout
//     of 0 or above the account's limit (MaxLengthHours), or closed port
//     URLs without secure; 404 "template '<id>' not found" for a template
//     it does not know;
//   - GET /v2/sandboxes?metadata=k%3Dv&state=running,paused&limit=&nextToken=
//     answers 200 with ListedSandbox items and an X-Next-Token header;
//   - GET /sandboxes/{sandboxID} answers SandboxDetail;
//   - DELETE /sandboxes/{sandboxID} answers 204, 404 when it is unknown;
//   - POST /sandboxes/{sandboxID}/connect, ConnectSandbox {timeout},
//     answers 200 with the sandbox (the TTL is only ever extended);
//   - any other route answers 404;
//   - every call needs X-API-Key; errors are {"code": <status>, "message"}.
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
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/providers/internal/fakeapi"
)

// Domain is the sandbox domain the fake answers with.
const Domain = "e2b.test"

// T is what the fake needs from a test.
type T = fakeapi.T

// DefaultMaxLengthHours is the longest a sandbox may live, in hours, on
// an account of E2B's base tier: infra's migration
// packages/db/migrations/20240219190940_add_max_length_hours.sql gives the
// tiers 1 hour, and https://e2b.dev/docs/sandbox says 1 hour on the Base
// tier and 24 on Pro. A create or connect asking more is refused (see
// create).
const DefaultMaxLengthHours = 1

// Sandbox is a sandbox the fake holds.
type Sandbox struct {
	ID         string
	TemplateID string
	Timeout    int
	Metadata   map[string]string
	EnvVars    map[string]string
	// Secure and AllowInternetAccess are what the create asked (nil: not
	// sent).
	Secure, AllowInternetAccess *bool
	Public                      bool
	Token                       string // the traffic access token
	EnvdToken                   string // the envd access token of a secure sandbox
	StartedAt                   time.Time
	EndAt                       time.Time
	computer                    *fakeapi.Computer
}

// Fake is a running fake E2B.
type Fake struct {
	*fakeapi.Server
	// Key is the API key the fake accepts.
	Key string
	// Templates are the template ids it knows.
	Templates map[string]bool
	// Screens maps a template built from the desktop image to the X
	// display its sandboxes' desktop runs on (an Xvfb the test started);
	// their computerd serves it, as the image's does. Set it before the
	// first create.
	Screens map[string]string

	edge      *fakeapi.Edge
	dir       string
	sandboxes *fakeapi.Fleet[Sandbox]
	pageSize  atomic.Int32
	maxHours  atomic.Int64
}

// New starts a fake E2B that accepts key and knows templates; both
// servers and every sandbox go when the test ends.
func New(t T, key string, templates ...string) *Fake {
	f := &Fake{Key: key, Templates: map[string]bool{}, dir: t.TempDir(), sandboxes: fakeapi.NewFleet(t,
		func(s *Sandbox) *fakeapi.Computer { return s.computer },
		func(s *Sandbox) map[string]string { return s.Metadata })}
	f.pageSize.Store(100)
	f.maxHours.Store(DefaultMaxLengthHours)
	for _, tpl := range templates {
		f.Templates[tpl] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", f.create)
	mux.HandleFunc("GET /v2/sandboxes", f.list)
	mux.HandleFunc("GET /sandboxes/{id}", f.get)
	mux.HandleFunc("DELETE /sandboxes/{id}", f.kill)
	mux.HandleFunc("POST /sandboxes/{id}/connect", f.connect)
	// No other operation is used; the API's validator answers 404 for a
	// route the document does not have.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "validation error: no matching operation was found")
	})
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

// SetMaxLengthHours sets the longest a sandbox may live on the account, in
// hours (E2B's tiers: 1 for the base tier, 24 for Pro).
func (f *Fake) SetMaxLengthHours(h int64) { f.maxHours.Store(h) }

// SetPageSize sets how many sandboxes a list page holds.
func (f *Fake) SetPageSize(n int) { f.pageSize.Store(int32(n)) }

// Sandboxes returns the sandboxes the fake holds, by id.
func (f *Fake) Sandboxes() []Sandbox { return f.sandboxes.All() }

// Exists reports whether a sandbox has metadata label=value.
func (f *Fake) Exists(label, value string) bool { return f.sandboxes.Exists(label, value) }

func writeError(w http.ResponseWriter, status int, msg string) {
	fakeapi.WriteJSON(w, status, map[string]any{"code": status, "message": msg})
}

// createRequest is NewSandbox as the fake reads it, once the body has
// passed the document's schema.
type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int32            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             *struct {
		AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	} `json:"network"`
}

// create serves POST /sandboxes. After the document's schema (newSandbox)
// it plays, in their order, the checks of PostSandboxes in infra's
// packages/api/internal/handlers/sandbox_create.go.
func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	raw, msg := decodeBody(r, newSandbox)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	var req createRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		writeError(w, http.StatusBadRequest, "error when parsing request: "+err.Error())
		return
	}
	// The template reference is parsed (id.ParseName: 400), then looked up
	// (cache/templates/errors.go: 404 "template '<id>' not found", or
	// "tag '<tag>' does not exist for template '<id>'" for a tag it lacks;
	// the client reads these answers).
	name, tag, err := parseReference(req.TemplateID)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid template reference: "+err.Error())
		return
	}
	if !f.Templates[name] {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", name))
		return
	}
	if tag != "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("tag '%s' does not exist for template '%s'", tag, name))
		return
	}
	// The timeout (handlers/timeout_helper.go, validateAndParseTimeout):
	// 15 s when absent; 0, which the document allows, is refused; so is
	// more than the account's tier allows (MaxLengthHours).
	timeout := 15
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			writeError(w, http.StatusBadRequest, "the timeout must be more than 0")
			return
		}
		if max := f.maxHours.Load(); int64(*req.Timeout) > max*3600 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("the timeout may not be more than %d hours", max))
			return
		}
		timeout = int(*req.Timeout)
	}
	// autoPauseMemory false only applies with autoPause true.
	if req.AutoPauseMemory != nil && !*req.AutoPauseMemory && (req.AutoPause == nil || !*req.AutoPause) {
		writeError(w, http.StatusBadRequest, "autoPauseMemory=false applies only with autoPause true")
		return
	}
	secure := req.Secure != nil && *req.Secure
	// Port URLs closed to the public (network.allowPublicTraffic false)
	// require secure true: the API answers 400 otherwise, whatever the
	// document says. E2B's SDKs always send secure (true unless told:
	// packages/js-sdk/src/sandbox/sandboxApi.ts, createSandbox, and
	// packages/python-sdk/e2b/sandbox_sync/sandbox_api.py, _create_sandbox,
	// in github.com/e2b-dev/E2B at b8029973aa7d).
	public := true
	if req.Network != nil && req.Network.AllowPublicTraffic != nil {
		public = *req.Network.AllowPublicTraffic
	}
	if req.Network != nil && !public && !secure {
		writeError(w, http.StatusBadRequest, "a sandbox without public access needs secure envd access: send secure true")
		return
	}
	env := req.EnvVars
	if display := f.Screens[name]; display != "" {
		env = maps.Clone(env)
		if env == nil {
			env = map[string]string{}
		}
		env[desktop.EnvDesktop], env["DISPLAY"] = "1", display
	}
	c, err := fakeapi.StartComputer(f.dir, req.EnvVars[computerd.EnvTokenHash], env)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "sandbox failed to start")
		return
	}
	now := time.Now().UTC()
	s := &Sandbox{
		ID: "i" + fakeapi.RandomHex(10), TemplateID: name, Timeout: timeout,
		Metadata: req.Metadata, EnvVars: req.EnvVars, Public: public,
		Secure: req.Secure, AllowInternetAccess: req.AllowInternetAccess,
		Token: fakeapi.RandomHex(16), StartedAt: now, EndAt: now.Add(time.Duration(timeout) * time.Second), computer: c,
	}
	if secure {
		s.EnvdToken = fakeapi.RandomHex(16)
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
	if s.EnvdToken != "" {
		a["envdAccessToken"] = s.EnvdToken
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
	if msg := listQuery(r.URL.Query()); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
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
	limit := int(f.pageSize.Load())
	if l, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && l < limit {
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

// sandboxID reads the path's sandbox id, answering 400 when it is not one
// (see shortID).
func sandboxID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, ok := shortID(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid sandbox ID")
	}
	return id, ok
}

func notFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q does not exist or you have no access to it", id))
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	id, ok := sandboxID(w, r)
	if !ok {
		return
	}
	s, ok := f.sandboxes.Get(id)
	if !ok {
		notFound(w, id)
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, f.listed(s))
}

func (f *Fake) kill(w http.ResponseWriter, r *http.Request) {
	id, ok := sandboxID(w, r)
	if !ok {
		return
	}
	if _, ok := f.sandboxes.Remove(id); !ok {
		notFound(w, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect serves POST /sandboxes/{sandboxID}/connect: after the
// document's schema (connectSandbox), a timeout above the account's limit
// is refused (handlers/sandbox_connect.go), and the TTL is only extended.
func (f *Fake) connect(w http.ResponseWriter, r *http.Request) {
	raw, msg := decodeBody(r, connectSandbox)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	var req struct {
		Timeout int64 `json:"timeout"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		writeError(w, http.StatusBadRequest, "error when parsing request: "+err.Error())
		return
	}
	if max := f.maxHours.Load(); req.Timeout > max*3600 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the timeout may not be more than %d hours", max))
		return
	}
	id, ok := sandboxID(w, r)
	if !ok {
		return
	}
	var s *Sandbox
	f.sandboxes.Do(id, func(m *Sandbox) bool {
		if m != nil {
			if end := time.Now().Add(time.Duration(req.Timeout) * time.Second); end.After(m.EndAt) {
				m.EndAt = end
			}
			c := *m
			s = &c
		}
		return false
	})
	if s == nil {
		notFound(w, id)
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
