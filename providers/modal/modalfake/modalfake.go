// Package modalfake is a local fake of Modal's sandbox API for the modal
// provider's tests. Modal documents that API as the gRPC service
// modal.client.ModalClient in modal_proto/api.proto of
// github.com/modal-labs/modal-client (commit 69519aef, August 2026); the
// fake serves the methods the provider calls through the Connect
// protocol's JSON mapping (POST /modal.client.ModalClient/<Method>, proto3
// JSON field names, errors {"code", "message"} with Connect's HTTP
// statuses: unauthenticated 401, not_found 404, resource_exhausted 429,
// internal 500, unavailable 503):
//
//   - AppGetOrCreate {appName, environmentName, objectCreationType} -> {appId}
//   - SecretGetOrCreate {objectCreationType, envDict, appId} -> {secretId}
//   - SandboxCreate {appId, definition{imageId, timeoutSecs, secretIds,
//     openPorts{ports[{port}]}}, tags[{tagName, tagValue}]} -> {sandboxId}
//   - SandboxGetTunnels {sandboxId, timeout} -> {result, tunnels[{host,
//     port, containerPort}]}
//   - SandboxList {appId, tags, includeFinished, beforeTimestamp} ->
//     {sandboxes[SandboxInfo]}, newest first, at most PageSize of them
//     created before beforeTimestamp (when set): Modal's client asks again
//     with the createdAt of the last one until a batch is empty
//     (Sandbox.list in modal/sandbox.py)
//   - SandboxTerminate {sandboxId} -> {}
//
// Calls need the x-modal-token-id and x-modal-token-secret headers. A
// sandbox's tunnels (https://<host>:443) are served by a second listener
// (see Transport) that forwards port 7070 to the sandbox's computerd, a
// real one running in-process with the sandbox's secrets as its
// environment (fakeapi).
package modalfake

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers/internal/fakeapi"
)

// TunnelDomain is the domain of the fake's tunnel hosts.
const TunnelDomain = "modal.test"

// T is what the fake needs from a test.
type T = fakeapi.T

// Sandbox is a sandbox the fake holds.
type Sandbox struct {
	ID          string
	AppID       string
	ImageID     string
	TimeoutSecs int
	Tags        map[string]string
	Env         map[string]string
	Ports       []int
	CreatedAt   float64 // seconds since 1970, as SandboxInfo.created_at
	computer    *fakeapi.Computer
}

// Fake is a running fake Modal.
type Fake struct {
	*fakeapi.Server
	TokenID, TokenSecret string
	Images               map[string]bool
	// PageSize is the most sandboxes one SandboxList answers (default
	// 10; set it before the first call).
	PageSize int

	edge      *fakeapi.Edge
	dir       string
	sandboxes *fakeapi.Fleet[Sandbox]

	mu          sync.Mutex
	apps        map[string]string // id by name
	secrets     map[string]map[string]string
	lastCreated float64
}

var connectCodes = map[int]string{
	400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
	409: "already_exists", 429: "resource_exhausted", 500: "internal", 503: "unavailable", 504: "deadline_exceeded",
}

func writeError(w http.ResponseWriter, status int, msg string) {
	code, ok := connectCodes[status]
	if !ok {
		code = "unknown"
	}
	fakeapi.WriteJSON(w, status, map[string]string{"code": code, "message": msg})
}

// New starts a fake Modal accepting the token id and secret and knowing
// the image ids.
func New(t T, tokenID, tokenSecret string, images ...string) *Fake {
	f := &Fake{TokenID: tokenID, TokenSecret: tokenSecret, Images: map[string]bool{}, dir: t.TempDir(),
		apps: map[string]string{}, secrets: map[string]map[string]string{}, sandboxes: fakeapi.NewFleet(t,
			func(s *Sandbox) *fakeapi.Computer { return s.computer },
			func(s *Sandbox) map[string]string { return s.Tags })}
	for _, im := range images {
		f.Images[im] = true
	}
	mux := http.NewServeMux()
	for name, h := range map[string]http.HandlerFunc{
		"AppGetOrCreate": f.appGetOrCreate, "SecretGetOrCreate": f.secretGetOrCreate,
		"SandboxCreate": f.sandboxCreate, "SandboxGetTunnels": f.sandboxGetTunnels,
		"SandboxList": f.sandboxList, "SandboxTerminate": f.sandboxTerminate,
	} {
		mux.Handle("POST /modal.client.ModalClient/"+name, h)
	}
	f.Server = fakeapi.New(t, mux, fakeapi.Options{
		Authorized: func(r *http.Request) bool {
			return r.Header.Get("x-modal-token-id") == f.TokenID && r.Header.Get("x-modal-token-secret") == f.TokenSecret
		},
		Kind: func(r *http.Request) fakeapi.Kind {
			switch {
			case strings.HasSuffix(r.URL.Path, "/SandboxCreate"):
				return fakeapi.Create
			case strings.HasSuffix(r.URL.Path, "/SandboxTerminate"):
				return fakeapi.Delete
			case strings.HasSuffix(r.URL.Path, "/SandboxList"):
				return fakeapi.List
			}
			return fakeapi.Other
		},
		WriteError: writeError,
	})
	f.edge = fakeapi.NewEdge(t, TunnelDomain, f.route)
	return f
}

// Transport sends requests for tunnel hosts to the fake's tunnel listener.
func (f *Fake) Transport() *http.Transport { return f.edge.Transport() }

// Sandboxes returns the running sandboxes.
func (f *Fake) Sandboxes() []Sandbox { return f.sandboxes.All() }

// Exists reports whether a running sandbox is tagged label=value.
func (f *Fake) Exists(label, value string) bool { return f.sandboxes.Exists(label, value) }

// DeleteApp removes the app named name, as `modal app stop` and its
// removal do; its sandboxes stay until they end.
func (f *Fake) DeleteApp(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.apps, name)
}

func randomID(prefix string) string { return prefix + fakeapi.RandomHex(11) }

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "content type "+ct+" is not application/json")
		return false
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return false
	}
	return true
}

func (f *Fake) appGetOrCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppName            string `json:"appName"`
		ObjectCreationType string `json:"objectCreationType"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.AppName == "" {
		writeError(w, http.StatusBadRequest, "appName is required")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.apps[req.AppName]
	if !ok {
		if req.ObjectCreationType != "OBJECT_CREATION_TYPE_CREATE_IF_MISSING" {
			writeError(w, http.StatusNotFound, "App '"+req.AppName+"' not found")
			return
		}
		id = randomID("ap-")
		f.apps[req.AppName] = id
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]string{"appId": id})
}

func (f *Fake) knownApp(id string) bool {
	for _, a := range f.apps {
		if a == id {
			return true
		}
	}
	return false
}

func (f *Fake) secretGetOrCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ObjectCreationType string            `json:"objectCreationType"`
		EnvDict            map[string]string `json:"envDict"`
		AppID              string            `json:"appId"`
	}
	if !decode(w, r, &req) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.ObjectCreationType == "OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP" && !f.knownApp(req.AppID) {
		writeError(w, http.StatusNotFound, "app not found")
		return
	}
	id := randomID("st-")
	f.secrets[id] = req.EnvDict
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"secretId": id})
}

func (f *Fake) sandboxCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppID      string `json:"appId"`
		Definition struct {
			ImageID     string   `json:"imageId"`
			TimeoutSecs int      `json:"timeoutSecs"`
			SecretIDs   []string `json:"secretIds"`
			OpenPorts   struct {
				Ports []struct {
					Port int `json:"port"`
				} `json:"ports"`
			} `json:"openPorts"`
		} `json:"definition"`
		Tags []struct {
			TagName  string `json:"tagName"`
			TagValue string `json:"tagValue"`
		} `json:"tags"`
	}
	if !decode(w, r, &req) {
		return
	}
	f.mu.Lock()
	if !f.knownApp(req.AppID) {
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "app not found")
		return
	}
	if !f.Images[req.Definition.ImageID] {
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "Image "+req.Definition.ImageID+" not found")
		return
	}
	env := map[string]string{}
	for _, id := range req.Definition.SecretIDs {
		sec, ok := f.secrets[id]
		if !ok {
			f.mu.Unlock()
			writeError(w, http.StatusNotFound, "Secret "+id+" not found")
			return
		}
		for k, v := range sec {
			env[k] = v
		}
	}
	f.mu.Unlock()
	if req.Definition.TimeoutSecs <= 0 || req.Definition.TimeoutSecs > 24*3600 {
		writeError(w, http.StatusBadRequest, "timeoutSecs must be between 1 and 86400")
		return
	}
	c, err := fakeapi.StartComputer(f.dir, env[computerd.EnvTokenHash], env)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "sandbox failed to start")
		return
	}
	f.mu.Lock()
	// Distinct times, so that a page boundary never splits a tie.
	created := max(float64(time.Now().UnixMicro())/1e6, f.lastCreated+1e-6)
	f.lastCreated = created
	f.mu.Unlock()
	s := &Sandbox{ID: randomID("sb-"), AppID: req.AppID, ImageID: req.Definition.ImageID,
		TimeoutSecs: req.Definition.TimeoutSecs, Tags: map[string]string{}, Env: env, CreatedAt: created, computer: c}
	for _, p := range req.Definition.OpenPorts.Ports {
		s.Ports = append(s.Ports, p.Port)
	}
	for _, t := range req.Tags {
		s.Tags[t.TagName] = t.TagValue
	}
	f.sandboxes.Add(s.ID, s)
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"sandboxId": s.ID})
}

func (f *Fake) tunnels(s Sandbox) []map[string]any {
	out := []map[string]any{}
	for _, p := range s.Ports {
		out = append(out, map[string]any{"host": strings.TrimPrefix(s.ID, "sb-") + "-" + itoa(p) + "." + TunnelDomain, "port": 443, "containerPort": p})
	}
	return out
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func (f *Fake) sandboxGetTunnels(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SandboxID string `json:"sandboxId"`
	}
	if !decode(w, r, &req) {
		return
	}
	s, ok := f.sandboxes.Get(req.SandboxID)
	if !ok {
		writeError(w, http.StatusNotFound, "Sandbox "+req.SandboxID+" not found")
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"result": map[string]any{"status": "GENERIC_STATUS_UNSPECIFIED"}, "tunnels": f.tunnels(s)})
}

func (f *Fake) sandboxList(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppID string `json:"appId"`
		Tags  []struct {
			TagName  string `json:"tagName"`
			TagValue string `json:"tagValue"`
		} `json:"tags"`
		BeforeTimestamp float64 `json:"beforeTimestamp"`
	}
	if !decode(w, r, &req) {
		return
	}
	want := map[string]string{}
	for _, t := range req.Tags {
		want[t.TagName] = t.TagValue
	}
	matching := f.sandboxes.Matching(want)
	sort.Slice(matching, func(i, j int) bool { return matching[i].CreatedAt > matching[j].CreatedAt })
	page := f.PageSize
	if page <= 0 {
		page = 10
	}
	out := []map[string]any{}
	for _, s := range matching {
		if req.AppID != "" && s.AppID != req.AppID || req.BeforeTimestamp > 0 && s.CreatedAt >= req.BeforeTimestamp {
			continue
		}
		if len(out) == page {
			break
		}
		tags := []map[string]string{}
		for k, v := range s.Tags {
			tags = append(tags, map[string]string{"tagName": k, "tagValue": v})
		}
		out = append(out, map[string]any{"id": s.ID, "appId": s.AppID, "imageId": s.ImageID, "tags": tags, "createdAt": s.CreatedAt,
			"timeoutSecs": s.TimeoutSecs, "tunnels": f.tunnels(s), "taskInfo": map[string]any{"id": "ta-" + s.ID, "sandboxId": s.ID}})
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

func (f *Fake) sandboxTerminate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SandboxID string `json:"sandboxId"`
	}
	if !decode(w, r, &req) {
		return
	}
	if _, ok := f.sandboxes.Remove(req.SandboxID); !ok {
		writeError(w, http.StatusNotFound, "Sandbox "+req.SandboxID+" not found")
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{})
}

// route serves a tunnel, https://<sandbox>-<port>.<domain>: port 7070 of
// a running sandbox.
func (f *Fake) route(w http.ResponseWriter, r *http.Request, label string) string {
	id, port, ok := strings.Cut(label, "-")
	s, known := f.sandboxes.Get("sb-" + id)
	if !ok || !known || port != itoa(computerd.Port) {
		http.Error(w, "no such tunnel", http.StatusNotFound)
		return ""
	}
	return s.computer.URL
}
