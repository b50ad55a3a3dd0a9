package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store"
)

const operatorToken = "providertest-operator-token"

// env is one scenario's supervisor, provider and backend.
type env struct {
	t      T
	h      Harness
	id     string
	target Target
	faults Faults
	svc    *supervisor.Service
	st     store.Store
	clk    *clock.Fake
	srv    *httptest.Server
	client *http.Client
	// computerd is the supervisor's client to the computers.
	computerd *http.Client
	logs      *syncbuf.Buffer // the supervisor's and the provider's logs
	// restart returns another supervisor on the same store and provider,
	// as after a restart.
	restart func() *supervisor.Service
	// answers holds every API answer body.
	answers *syncbuf.Buffer
	ctx     context.Context
}

// scenarioTimeout bounds one scenario.
const scenarioTimeout = 3 * time.Minute

func newEnv(t T, h Harness) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	t.Cleanup(cancel)
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := &env{t: t, h: h, id: h.ID, logs: logs, answers: &syncbuf.Buffer{}, ctx: ctx}
	if e.id == "" {
		e.id = "test"
	}
	if h.Image == "" {
		e.h.Image = providers.ImageHeadless
	}
	e.target = h.New(t, log.With("provider", e.id))
	if e.target.Provider == nil {
		t.Fatalf("providertest: Target.Provider is nil")
	}
	if e.target.Exists == nil {
		t.Fatalf("providertest: Target.Exists is required")
	}
	e.faults = e.target.Faults
	p := e.target.Provider
	if e.faults == nil {
		if e.target.Credentials != nil {
			t.Fatalf("providertest: a provider that takes credentials must give Target.Faults, so that its backend refuses them")
		}
		p, e.faults = Wrap(p)
	}

	dir := t.TempDir()
	parts := supervisortest.NewParts(t, dir)
	st, box, tokens := parts.Store, parts.Box, parts.Tokens
	// Archives of persistent computers, sealed, in a folder of the test's.
	local, err := objstore.NewLocal(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatalf("object store: %v", err)
	}
	objects, err := objstore.NewEncrypted(local, box)
	if err != nil {
		t.Fatalf("object store: %v", err)
	}
	e.clk = clock.NewFake(time.Now().UTC().Truncate(time.Second))
	ready := h.ReadyTimeout
	if ready <= 0 {
		ready = 60 * time.Second
	}
	e.client = &http.Client{Transport: &http.Transport{}, Timeout: 2 * time.Minute}
	e.computerd = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	e.svc, err = supervisor.New(supervisor.Config{
		Store: st, Providers: map[string]providers.Provider{e.id: p}, DefaultProvider: e.id,
		Box: box, Tokens: tokens, Clock: e.clk, Logger: log, ReadyTimeout: ready,
		HTTPClient:  e.computerd,
		ComputerEnv: map[string]string{"BERTH_CONFORMANCE": "1"},
		Objects:     objects,
	})
	if err != nil {
		t.Fatalf("supervisor: %v", err)
	}
	e.st = st
	e.restart = func() *supervisor.Service {
		svc, err := supervisor.New(supervisor.Config{
			Store: st, Providers: map[string]providers.Provider{e.id: p}, DefaultProvider: e.id,
			Box: box, Tokens: tokens, Clock: e.clk, Logger: log, ReadyTimeout: ready,
			HTTPClient: e.computerd, ComputerEnv: map[string]string{"BERTH_CONFORMANCE": "1"},
			Objects: objects,
		})
		if err != nil {
			t.Fatalf("second supervisor: %v", err)
		}
		return svc
	}
	e.srv = httptest.NewServer(apiserver.New(e.svc, operatorToken, log))
	t.Cleanup(func() {
		e.stopAll()
		e.srv.Close()
		e.client.CloseIdleConnections()
		e.computerd.CloseIdleConnections()
		st.Close()
		if t.Failed() {
			t.Logf("supervisor and provider logs:\n%s", logs.String())
		}
	})
	return e
}

// stopAll ends what a failed scenario left running, so that the backend's
// cleanup finds nothing in use.
func (e *env) stopAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	xs, err := e.st.SessionsByState(ctx, store.StateRunning, store.StateStopping, store.StateCleanupFailed)
	if err != nil {
		return
	}
	for _, x := range xs {
		e.svc.Stop(ctx, x.AgentID)
	}
}

// answer is a decoded API answer.
type answer struct {
	Status  int
	Code    string
	Message string
	Body    []byte
}

// call sends a request to the supervisor's API and decodes a 2xx answer
// into out.
func (e *env) call(method, path string, body, out any) answer {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			e.t.Fatalf("encode %s %s: %v", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(e.ctx, method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	fmt.Fprintf(e.answers, "%s %s -> %d %s\n", method, path, resp.StatusCode, raw)
	a := answer{Status: resp.StatusCode, Body: raw}
	if resp.StatusCode >= 300 {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			e.t.Fatalf("%s %s: status %d without an error envelope: %s", method, path, resp.StatusCode, raw)
		}
		a.Code, a.Message = eb.Error.Code, eb.Error.Message
		return a
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return a
}

// must calls and fails unless the answer has status want.
func (e *env) must(method, path string, body any, want int, out any) answer {
	e.t.Helper()
	a := e.call(method, path, body, out)
	if a.Status != want {
		e.t.Fatalf("%s %s: %d %s %q, want %d", method, path, a.Status, a.Code, a.Message, want)
	}
	return a
}

// connect creates agent and connects it to the provider under test.
func (e *env) connect(agent string) {
	e.t.Helper()
	e.connectWith(agent, nil)
}

// connectWith is connect with more fields in the connection's request.
func (e *env) connectWith(agent string, extra map[string]any) {
	e.t.Helper()
	e.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent, "workspace": "conformance"}, http.StatusCreated, nil)
	req := map[string]any{"agent": agent, "provider": e.id, "leaseSeconds": 300, "dailySeconds": 3600, "image": e.h.Image}
	maps.Copy(req, extra)
	if e.target.Credentials != nil {
		req["credentials"] = e.target.Credentials
	}
	e.must("POST", "/v1/computers", req, http.StatusCreated, nil)
}

func (e *env) start(agent string) supervisor.SessionView {
	e.t.Helper()
	var v supervisor.SessionView
	e.must("POST", "/v1/agents/"+agent+"/computer/start", nil, http.StatusOK, &v)
	if v.State != store.StateRunning || v.ID == "" || v.Provider != e.id {
		e.t.Fatalf("start: session %+v, want a running %s session", v, e.id)
	}
	return v
}

func (e *env) exec(agent, command string) supervisor.ExecResult {
	e.t.Helper()
	var r supervisor.ExecResult
	e.must("POST", "/v1/agents/"+agent+"/computer/exec", map[string]any{"command": command, "timeoutSeconds": 30}, http.StatusOK, &r)
	if r.Uncertain {
		e.t.Fatalf("exec %q: uncertain outcome: %+v", command, r)
	}
	return r
}

// session reads a session from the store.
func (e *env) session(id string) store.Session {
	e.t.Helper()
	x, err := e.st.GetSession(e.ctx, id)
	if err != nil {
		e.t.Fatalf("session %s: %v", id, err)
	}
	return x
}

// exists asks the backend whether it holds a machine labelled label=value.
func (e *env) exists(label, value string) bool {
	e.t.Helper()
	ok, err := e.target.Exists(e.ctx, label, value)
	if err != nil {
		e.t.Fatalf("backend: does a machine with %s=%s exist: %v", label, value, err)
	}
	return ok
}

// secrets are the values that must never be seen.
func (e *env) secrets() []string {
	if e.target.Secrets != nil {
		return e.target.Secrets
	}
	var out []string
	for _, v := range e.target.Credentials {
		if len(v) >= 8 {
			out = append(out, v)
		}
	}
	return out
}

// checkNoSecrets fails when a credential shows in the logs or an answer.
func (e *env) checkNoSecrets() {
	e.t.Helper()
	logs, answers := e.logs.String(), e.answers.String()
	for _, s := range e.secrets() {
		if strings.Contains(logs, s) {
			e.t.Errorf("a credential (%d characters) appears in the supervisor's or the provider's logs", len(s))
		}
		if strings.Contains(answers, s) {
			e.t.Errorf("a credential (%d characters) appears in an API answer", len(s))
		}
	}
}
