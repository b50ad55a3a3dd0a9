package boat

// fakeBoat is a local Boat API server for the provider's tests. Boat's
// public documentation (https://docs.boat.dev/api/v1, its OpenAPI file
// https://docs.boat.dev/openapi/boat-v1.yaml, and the command reference
// https://docs.boat.dev/api/reference/agent/execute-sandbox-command) gives
// the base https://boat.dev/api/v1, bearer API keys, /sandboxes with a
// create that answers 202 while the VM provisions, creation idempotency
// through Idempotency-Key, POST /sandboxes/{id}/commands that runs a shell
// command synchronously, and POST /sandboxes/{id}/host that publishes a
// port. What the public material found here does not spell out, the fake
// takes from SPEC section 5 and says so: the body fields env, snapshots,
// monitoring, autoStopSeconds and metadata, the metadata[KEY]=VALUE list
// filter, the name of the delete confirmation header (ConfirmHeader, the
// sandbox id), a delete that answers 202 and ends in 404, and the error
// body {"error": {"code", "message"}}.
//
// The VM's Docker is played by providers/fake: the docker run command the
// provider sends starts a real in-process computerd with the token hash
// and environment given by its -e flags. Bad days: 401 for every call while
// keys are refused, 429 on the next create, a create whose reply is lost
// after the sandbox was made, deletes that fail with 503, and 400 for a
// sandbox type other than small, default and large.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
)

type fakeBoat struct {
	t   testing.TB
	srv *httptest.Server
	Key string
	vms *fake.Provider

	hostedtest.Faults
	sandboxes  map[string]*fakeSandbox
	byKey      map[string]string // Idempotency-Key -> sandbox id
	creates    int
	lastCreate map[string]any
}

type fakeSandbox struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	State    string            `json:"state"`
	Metadata map[string]string `json:"metadata"`
	Hosts    []fakeHost        `json:"hosts"`
	polls    int
	deleting bool
	endpoint string
}

type fakeHost struct {
	Port int    `json:"port"`
	URL  string `json:"url"`
}

func newFakeBoat(t testing.TB) *fakeBoat {
	f := &fakeBoat{t: t, Key: "boat_" + strings.ToLower(rand.Text()), vms: fake.New(t.TempDir(), nil),
		sandboxes: map[string]*fakeSandbox{}, byKey: map[string]string{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() { f.srv.Close(); f.vms.Close() })
	return f
}

func (f *fakeBoat) fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *fakeBoat) json(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeBoat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Refuse || r.Header.Get("Authorization") != "Bearer "+f.Key {
		f.fail(w, 401, "unauthorized", "invalid API key")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/api/v1")
	switch {
	case path == "/sandboxes" && r.Method == "POST":
		f.create(w, r)
	case path == "/sandboxes" && r.Method == "GET":
		out := []*fakeSandbox{}
		for _, s := range f.sandboxes {
			keep := true
			for k, v := range r.URL.Query() {
				if name, ok := strings.CutPrefix(k, "metadata["); ok && s.Metadata[strings.TrimSuffix(name, "]")] != v[0] {
					keep = false
				}
			}
			if keep {
				out = append(out, s)
			}
		}
		f.json(w, 200, map[string]any{"sandboxes": out})
	case strings.HasPrefix(path, "/sandboxes/"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(path, "/sandboxes/"), "/")
		s := f.sandboxes[id]
		if s == nil {
			f.fail(w, 404, "not_found", "sandbox not found")
			return
		}
		switch {
		case sub == "" && r.Method == "GET":
			s.polls++
			if s.State == "provisioning" && s.polls >= 2 {
				s.State = "running"
			}
			if s.deleting && s.polls >= 1 {
				delete(f.sandboxes, id)
				f.vms.Destroy(context.Background(), "fake-"+id)
				f.fail(w, 404, "not_found", "sandbox not found")
				return
			}
			f.json(w, 200, map[string]any{"sandbox": s})
		case sub == "" && r.Method == "DELETE":
			if r.Header.Get(ConfirmHeader) != id {
				f.fail(w, 400, "confirmation_required", "send "+ConfirmHeader+" with the sandbox id")
				return
			}
			if hostedtest.Take(&f.FailDeletes) {
				f.fail(w, 503, "unavailable", "try again")
				return
			}
			s.State, s.deleting, s.polls = "deleting", true, 0
			f.json(w, 202, map[string]any{"sandbox": s})
		case sub == "commands" && r.Method == "POST":
			f.command(w, r, s)
		case sub == "host" && r.Method == "POST":
			var body struct {
				Port   int  `json:"port"`
				Public bool `json:"public"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Port != computerd.Port || s.endpoint == "" {
				f.fail(w, 409, "port_not_listening", "nothing listens on that port")
				return
			}
			s.Hosts = []fakeHost{{Port: body.Port, URL: s.endpoint}}
			f.json(w, 200, map[string]any{"url": s.endpoint})
		default:
			f.fail(w, 404, "not_found", "no such route")
		}
	default:
		f.fail(w, 404, "not_found", "no such route")
	}
}

func (f *fakeBoat) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.fail(w, 400, "bad_request", "bad body")
		return
	}
	f.creates++
	f.lastCreate = body
	if t := fmt.Sprint(body["type"]); t != "small" && t != "default" && t != "large" {
		f.fail(w, 400, "invalid_type", "unknown sandbox type "+t)
		return
	}
	if id, ok := f.byKey[r.Header.Get("Idempotency-Key")]; ok && r.Header.Get("Idempotency-Key") != "" {
		f.json(w, 200, map[string]any{"sandbox": f.sandboxes[id]})
		return
	}
	if hostedtest.Take(&f.RateLimit) {
		f.fail(w, 429, "rate_limited", "too many sandboxes started")
		return
	}
	meta := map[string]string{}
	if m, ok := body["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k], _ = v.(string)
		}
	}
	s := &fakeSandbox{ID: "bx_" + strings.ToLower(rand.Text()[:8]), Name: fmt.Sprint(body["name"]), State: "provisioning", Metadata: meta}
	f.sandboxes[s.ID] = s
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		f.byKey[k] = s.ID
	}
	if hostedtest.Take(&f.LoseReplies) {
		hostedtest.HangUp(w)
		return
	}
	f.json(w, 202, map[string]any{"sandbox": s})
}

// command plays the VM's shell: it understands the provider's docker run.
func (f *fakeBoat) command(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	var body struct {
		Command string `json:"command"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	if s.State != "running" {
		f.fail(w, 409, "not_running", "sandbox is "+s.State)
		return
	}
	args, err := splitQuoted(body.Command)
	if err != nil || len(args) < 3 || args[0] != "docker" || args[1] != "run" {
		f.json(w, 200, map[string]any{"exitCode": 127, "stdout": "", "stderr": "fake VM: only docker run is played"})
		return
	}
	if img := args[len(args)-1]; strings.Contains(img, "missing") {
		f.json(w, 200, map[string]any{"exitCode": 125, "stderr": "Unable to find image '" + img + "' locally\nmanifest unknown"})
		return
	}
	env := map[string]string{}
	hash := ""
	for i := 0; i < len(args)-1; i++ {
		if args[i] == "-e" {
			k, v, _ := strings.Cut(args[i+1], "=")
			switch k {
			case computerd.EnvTokenHash:
				hash = v
			case computerd.EnvComputerID:
			default:
				env[k] = v
			}
		}
	}
	m, err := f.vms.Create(context.Background(), providers.Spec{ComputerID: s.ID, TokenHash: hash, Env: env})
	if err != nil {
		f.json(w, 200, map[string]any{"exitCode": 125, "stderr": err.Error()})
		return
	}
	s.endpoint = m.Endpoint
	f.json(w, 200, map[string]any{"exitCode": 0, "stdout": "0123456789ab\n", "stderr": ""})
}

// splitQuoted splits a command whose words are each in single quotes.
func splitQuoted(s string) ([]string, error) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] != '\'' {
			return nil, fmt.Errorf("unquoted word at %q", s)
		}
		var b strings.Builder
		i := 1
		for {
			j := strings.IndexByte(s[i:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote")
			}
			b.WriteString(s[i : i+j])
			i += j + 1
			if strings.HasPrefix(s[i:], `\''`) {
				b.WriteByte('\'')
				i += 3
				continue
			}
			break
		}
		out = append(out, b.String())
		s = s[i:]
	}
	return out, nil
}

func (f *fakeBoat) exists(ctx context.Context, label, value string) (bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, s := range f.sandboxes {
		if s.Metadata[label] == value {
			return true, nil
		}
	}
	return false, nil
}
