// Package daytonafake is a local fake of Daytona's API, for the daytona
// provider's tests. It follows the API as github.com/daytonaio/daytona
// defines it (apps/api/src/sandbox/controllers/sandbox.controller.ts,
// dto/create-sandbox.dto.ts, dto/sandbox.dto.ts,
// dto/list-sandboxes-query.dto.ts, dto/port-preview-url.dto.ts,
// filters/all-exceptions.filter.ts; commit b5a5d9e7, v0.190.0):
//
//   - POST /sandbox {name, snapshot, env, labels, public, autoStopInterval,
//     autoDeleteInterval, target} answers 200 with the SandboxDto in state
//     "creating"; the sandbox then moves through "starting" to "started"
//     (one step per GET /sandbox/{id}), as Daytona's are asynchronous;
//   - GET /sandbox?labels=<JSON>&cursor= answers {items, nextCursor};
//   - DELETE /sandbox/{id} answers 200 with the sandbox "destroying"; it is
//     gone (404) at the next GET;
//   - GET /sandbox/{id}/ports/{port}/preview-url answers {sandboxId, url,
//     token};
//   - calls need "Authorization: Bearer <key>" and, when the fake has an
//     organization, a matching X-Daytona-Organization-ID; errors are
//     {path, timestamp, statusCode, error, message}.
//
// A sandbox runs what its snapshot's entrypoint names, or its image's
// ENTRYPOINT, never the image's CMD: Daytona's runner makes its own daemon
// the container's entrypoint and gives it, as the command to run, the
// snapshot's entrypoint or else the image's ENTRYPOINT
// (apps/runner/pkg/docker/container_configs.go, getContainerCreateConfig;
// commit 01e64aa8). The fake starts computerd only when that command is
// computerd or desktop-start; otherwise the sandbox starts and its port
// 7070 never answers, as on Daytona.
//
// Preview URLs (https://<port>-<sandboxId>.<proxy domain>) are served by a
// second listener (see Transport) that checks x-daytona-preview-token on
// private sandboxes and forwards port 7070 to the sandbox's computerd, a
// real one running in-process with the sandbox's env (fakeapi).
package daytonafake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers/internal/fakeapi"
)

// ProxyDomain is the domain of the fake's preview URLs.
const ProxyDomain = "proxy.daytona.test"

// T is what the fake needs from a test.
type T = fakeapi.T

// Snapshot is a snapshot the fake knows, with the command its sandboxes
// run: the snapshot's entrypoint, or its image's ENTRYPOINT.
type Snapshot struct {
	Name       string
	Entrypoint []string
}

// startsComputerd reports whether a sandbox running entrypoint starts
// computerd: Berth's headless image runs computerd, its desktop image
// desktop-start, which starts computerd after X.
func startsComputerd(entrypoint []string) bool {
	if len(entrypoint) == 0 {
		return false
	}
	base := entrypoint[0][strings.LastIndex(entrypoint[0], "/")+1:]
	return base == "computerd" || base == "desktop-start"
}

// Sandbox is a sandbox the fake holds.
type Sandbox struct {
	ID               string
	Name             string
	Snapshot         string
	State            string
	Env              map[string]string
	Labels           map[string]string
	Public           bool
	AutoStopInterval int
	AutoDelete       *int
	Token            string
	ErrorReason      string
	computer         *fakeapi.Computer
}

// Fake is a running fake Daytona.
type Fake struct {
	*fakeapi.Server
	Key          string
	Organization string              // required in X-Daytona-Organization-ID when set
	Snapshots    map[string][]string // name: the entrypoint its sandboxes run

	edge      *fakeapi.Edge
	dir       string
	sandboxes *fakeapi.Fleet[Sandbox]
	pageSize  atomic.Int32
	failStart atomic.Pointer[string] // the next sandbox fails to start with this reason
}

// FailNextStart makes the next sandbox end in state "error" with reason
// instead of starting, as one does when its runner cannot start it.
func (f *Fake) FailNextStart(reason string) { f.failStart.Store(&reason) }

// New starts a fake Daytona that accepts key and knows snapshots.
func New(t T, key string, snapshots ...Snapshot) *Fake {
	f := &Fake{Key: key, Snapshots: map[string][]string{}, dir: t.TempDir(), sandboxes: fakeapi.NewFleet(t,
		func(s *Sandbox) *fakeapi.Computer { return s.computer },
		func(s *Sandbox) map[string]string { return s.Labels })}
	f.pageSize.Store(100)
	for _, s := range snapshots {
		f.Snapshots[s.Name] = s.Entrypoint
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandbox", f.create)
	mux.HandleFunc("GET /sandbox", f.list)
	mux.HandleFunc("GET /sandbox/{id}", f.get)
	mux.HandleFunc("DELETE /sandbox/{id}", f.delete)
	mux.HandleFunc("GET /sandbox/{id}/ports/{port}/preview-url", f.preview)
	f.Server = fakeapi.New(t, mux, fakeapi.Options{
		Authorized: func(r *http.Request) bool {
			if r.Header.Get("Authorization") != "Bearer "+f.Key {
				return false
			}
			return f.Organization == "" || r.Header.Get("X-Daytona-Organization-ID") == f.Organization
		},
		Kind:       fakeapi.CreateAt("/sandbox"),
		WriteError: func(w http.ResponseWriter, status int, msg string) { writeError(w, nil, status, msg) },
	})
	f.edge = fakeapi.NewEdge(t, ProxyDomain, f.route)
	return f
}

// Transport sends requests for preview URLs to the fake's proxy.
func (f *Fake) Transport() *http.Transport { return f.edge.Transport() }

// SetPageSize sets how many sandboxes a list page holds.
func (f *Fake) SetPageSize(n int) { f.pageSize.Store(int32(n)) }

// Sandboxes returns the sandboxes the fake holds.
func (f *Fake) Sandboxes() []Sandbox { return f.sandboxes.All() }

// Exists reports whether a sandbox is labelled label=value.
func (f *Fake) Exists(label, value string) bool { return f.sandboxes.Exists(label, value) }

func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	path := ""
	if r != nil {
		path = r.URL.RequestURI()
	}
	fakeapi.WriteJSON(w, status, map[string]any{
		"path": path, "timestamp": time.Now().UTC().Format(time.RFC3339),
		"statusCode": status, "error": http.StatusText(status), "message": msg,
	})
}

func (f *Fake) dto(s Sandbox) map[string]any {
	return map[string]any{
		"id": s.ID, "organizationId": "org", "name": s.Name, "snapshot": s.Snapshot, "user": "daytona",
		"env": s.Env, "labels": s.Labels, "public": s.Public, "networkBlockAll": false, "target": "us",
		"cpu": 1, "gpu": 0, "memory": 2, "disk": 10, "state": s.State, "autoStopInterval": s.AutoStopInterval,
		"toolboxProxyUrl": "http://" + ProxyDomain + "/toolbox", "errorReason": s.ErrorReason,
	}
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name               string            `json:"name"`
		Snapshot           string            `json:"snapshot"`
		Env                map[string]string `json:"env"`
		Labels             map[string]string `json:"labels"`
		Public             bool              `json:"public"`
		AutoStopInterval   *int              `json:"autoStopInterval"`
		AutoDeleteInterval *int              `json:"autoDeleteInterval"`
		Target             string            `json:"target"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, r, http.StatusBadRequest, "invalid body")
		return
	}
	entrypoint, ok := f.Snapshots[req.Snapshot]
	if !ok {
		// A 400, not a 404 (apps/api/src/sandbox/services/sandbox.service.ts,
		// BadRequestError).
		writeError(w, r, http.StatusBadRequest, fmt.Sprintf("Snapshot %s not found. Did you add it through the Daytona Dashboard?", req.Snapshot))
		return
	}
	stop := 15
	if req.AutoStopInterval != nil {
		stop = *req.AutoStopInterval
	}
	if stop < 0 {
		writeError(w, r, http.StatusBadRequest, "autoStopInterval must not be negative")
		return
	}
	for _, s := range f.sandboxes.All() {
		if req.Name != "" && s.Name == req.Name {
			writeError(w, r, http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", req.Name))
			return
		}
	}
	var c *fakeapi.Computer
	if startsComputerd(entrypoint) {
		var err error
		if c, err = fakeapi.StartComputer(f.dir, req.Env[computerd.EnvTokenHash], req.Env); err != nil {
			writeError(w, r, http.StatusInternalServerError, "An unexpected error occurred.")
			return
		}
	}
	s := &Sandbox{
		ID: fakeapi.RandomHex(16), Name: req.Name, Snapshot: req.Snapshot, State: "creating", Env: req.Env,
		Labels: req.Labels, Public: req.Public, AutoStopInterval: stop, AutoDelete: req.AutoDeleteInterval,
		Token: fakeapi.RandomHex(12), computer: c,
	}
	if s.Name == "" {
		s.Name = s.ID
	}
	if reason := f.failStart.Swap(nil); reason != nil {
		s.ErrorReason = *reason
	}
	dto := f.dto(*s)
	f.sandboxes.Add(s.ID, s)
	fakeapi.WriteJSON(w, http.StatusOK, dto)
}

// get answers a sandbox and moves it one step on: creating, starting,
// started (or creating, error after FailNextStart); a destroying one is
// gone.
func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	var dto map[string]any
	f.sandboxes.Do(r.PathValue("id"), func(s *Sandbox) bool {
		if s == nil {
			return false
		}
		switch {
		case s.State == "creating" && s.ErrorReason != "":
			s.State = "error"
		case s.State == "creating":
			s.State = "starting"
		case s.State == "starting":
			s.State = "started"
		case s.State == "destroying":
			return true
		}
		dto = f.dto(*s)
		return false
	})
	writeSandbox(w, r, dto)
}

// writeSandbox answers a sandbox's dto, or 404 when there is no such
// sandbox (dto is nil).
func writeSandbox(w http.ResponseWriter, r *http.Request, dto map[string]any) {
	if dto == nil {
		notFound(w, r)
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, dto)
}

// notFound answers 404 for the sandbox the request names, as Daytona does.
func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", r.PathValue("id")))
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			writeError(w, r, http.StatusBadRequest, "Invalid labels JSON format")
			return
		}
	}
	start := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			writeError(w, r, http.StatusBadRequest, "invalid cursor")
			return
		}
		start = n
	}
	sbs, size := f.sandboxes.Matching(want), int(f.pageSize.Load())
	items := []map[string]any{}
	for i := start; i < len(sbs) && len(items) < size; i++ {
		items = append(items, f.dto(sbs[i]))
	}
	var next any
	if start+size < len(sbs) {
		next = strconv.Itoa(start + size)
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	var dto map[string]any
	f.sandboxes.Do(r.PathValue("id"), func(s *Sandbox) bool {
		if s != nil {
			s.State = "destroying"
			dto = f.dto(*s)
		}
		return false
	})
	writeSandbox(w, r, dto)
}

func (f *Fake) preview(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, http.StatusBadRequest, "invalid port")
		return
	}
	s, ok := f.sandboxes.Get(r.PathValue("id"))
	if !ok {
		notFound(w, r)
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{
		"sandboxId": s.ID, "url": fmt.Sprintf("http://%d-%s.%s", port, s.ID, ProxyDomain), "token": s.Token,
	})
}

// route serves the preview URL http://<port>-<sandboxId>.<proxy domain>:
// port 7070 of a started sandbox, with its preview token unless it is
// public.
func (f *Fake) route(w http.ResponseWriter, r *http.Request, label string) string {
	port, id, ok := strings.Cut(label, "-")
	s, known := f.sandboxes.Get(id)
	switch {
	case !ok:
		http.Error(w, "unknown host", http.StatusBadGateway)
	case !known || s.State != "started":
		http.Error(w, "sandbox not found or not started", http.StatusNotFound)
	case !s.Public && r.Header.Get("x-daytona-preview-token") != s.Token:
		http.Error(w, "unauthorized: missing or wrong preview token", http.StatusUnauthorized)
	case port != strconv.Itoa(computerd.Port) || s.computer == nil:
		http.Error(w, "port not open", http.StatusBadGateway)
	default:
		return s.computer.URL
	}
	return ""
}
