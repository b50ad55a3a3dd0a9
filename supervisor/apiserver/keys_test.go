package apiserver_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// as returns e calling with bearer token tok.
func (e *env) as(tok string) *env {
	c := *e
	c.bearer = tok
	return &c
}

// agentIn registers agent in workspace ws and connects it to the fake
// provider.
func (e *env) agentIn(agent, ws string) {
	e.t.Helper()
	e.mustCall("POST", "/v1/agents", map[string]any{"id": agent, "name": agent, "workspace": ws}, 201, nil)
	e.mustCall("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "fake", "leaseSeconds": 300, "dailySeconds": 3600}, 201, nil)
}

func (e *env) key(req api.CreateKeyRequest) api.Key {
	e.t.Helper()
	var k api.Key
	e.mustCall("POST", "/v1/keys", req, 201, &k)
	if k.Secret == "" || k.ID == "" {
		e.t.Fatalf("created key %+v: no id or secret", k)
	}
	return k
}

func (e *env) want(method, path string, body any, want int, wantCode string) {
	e.t.Helper()
	st, code := e.call(method, path, body, nil)
	if st != want || code != wantCode {
		e.t.Errorf("%s %s: %d %q, want %d %q", method, path, st, code, want, wantCode)
	}
}

func TestAgentKeyScope(t *testing.T) {
	e := newEnv(t)
	e.agentIn("a1", "w1")
	e.agentIn("a2", "w1")
	k := e.key(api.CreateKeyRequest{Name: "a1 tools", Scope: "agent", Agent: "a1"})
	if k.Workspace != "w1" || k.Agent != "a1" || k.Scope != "agent" {
		t.Fatalf("key = %+v", k)
	}
	a := e.as(k.Secret)
	a.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	a.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "echo hi"}, 200, nil)
	a.mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	a.mustCall("POST", "/v1/agents/a1/computer/stop", nil, 200, nil)

	const forbidden = supervisor.CodeForbidden
	a.want("POST", "/v1/agents/a2/computer/start", nil, 403, forbidden)
	a.want("GET", "/v1/agents/a2/computer", nil, 403, forbidden)
	a.want("POST", "/v1/computers", map[string]any{"agent": "a1", "provider": "fake"}, 403, forbidden)
	a.want("DELETE", "/v1/agents/a1/computer", nil, 403, forbidden)
	a.want("POST", "/v1/agents/a1/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, 403, forbidden)
	a.want("GET", "/v1/usage", nil, 403, forbidden)
	a.want("GET", "/v1/computers", nil, 403, forbidden)
	a.want("POST", "/v1/keys", map[string]any{"name": "x", "scope": "agent", "agent": "a1"}, 403, forbidden)
	a.want("GET", "/v1/keys", nil, 403, forbidden)
	a.want("GET", "/v1/audit", nil, 403, forbidden)
	a.want("POST", "/v1/agents", map[string]any{"name": "x"}, 403, forbidden)
	a.want("POST", "/v1/companions/pair-codes", nil, 403, forbidden)
	a.want("DELETE", "/v1/workspaces/w1", nil, 403, forbidden)

	// Revoked: refused at once.
	e.mustCall("DELETE", "/v1/keys/"+k.ID, nil, 200, nil)
	a.want("POST", "/v1/agents/a1/computer/start", nil, 401, supervisor.CodeUnauthorized)

	// Wrong secret, unknown key, malformed token: 401 with the envelope.
	e.as(k.Secret+"x").want("GET", "/v1/agents/a1/computer", nil, 401, supervisor.CodeUnauthorized)
	e.as("berth_k_knope_secret").want("GET", "/v1/agents/a1/computer", nil, 401, supervisor.CodeUnauthorized)
	e.as("nonsense").want("GET", "/v1/agents/a1/computer", nil, 401, supervisor.CodeUnauthorized)

	// Expired.
	x := e.key(api.CreateKeyRequest{Name: "short", Scope: "agent", Agent: "a1", ExpiresInSeconds: 60})
	e.as(x.Secret).mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	e.clock.Advance(61 * time.Second)
	e.as(x.Secret).want("GET", "/v1/agents/a1/computer", nil, 401, supervisor.CodeUnauthorized)

	at := e.clock.Now().Add(time.Hour)
	var y api.Key
	e.mustCall("POST", "/v1/keys", map[string]any{"name": "until", "scope": "agent", "agent": "a1", "expiresAt": at}, 201, &y)
	if !y.ExpiresAt.Equal(at) {
		t.Errorf("expiresAt = %v, want %v", y.ExpiresAt, at)
	}
	e.want("POST", "/v1/keys", map[string]any{"name": "past", "scope": "agent", "agent": "a1", "expiresAt": e.clock.Now().Add(-time.Hour)}, 400, supervisor.CodeBadRequest)

	// The list never shows a secret; revocation shows.
	var list api.KeyList
	e.mustCall("GET", "/v1/keys", nil, 200, &list)
	i := slices.IndexFunc(list.Keys, func(l api.Key) bool { return l.ID == k.ID })
	if len(list.Keys) != 3 || i < 0 || list.Keys[i].Secret != "" || list.Keys[i].RevokedAt.IsZero() || list.Keys[i].LastUsedAt.IsZero() {
		t.Errorf("keys = %+v", list.Keys)
	}
}

func TestWorkspaceKeyScope(t *testing.T) {
	e := newEnv(t)
	e.agentIn("a1", "w1")
	e.agentIn("b1", "w2")
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	e.mustCall("POST", "/v1/agents/b1/computer/start", nil, 200, nil)
	other := e.key(api.CreateKeyRequest{Name: "w2 admin", Scope: "workspace", Workspace: "w2"}).ID
	w := e.as(e.key(api.CreateKeyRequest{Name: "w1 admin", Scope: "workspace", Workspace: "w1"}).Secret)

	var comps struct{ Computers []api.Computer }
	w.mustCall("GET", "/v1/computers", nil, 200, &comps)
	if len(comps.Computers) != 1 || comps.Computers[0].Agent != "a1" {
		t.Errorf("computers = %+v, want a1 only", comps.Computers)
	}
	w.mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	// Agents of another workspace are answered like missing ones.
	w.want("GET", "/v1/agents/b1/computer", nil, 404, supervisor.CodeNotFound)
	w.want("POST", "/v1/agents/b1/computer/exec", map[string]any{"command": "true"}, 404, supervisor.CodeNotFound)
	w.want("DELETE", "/v1/agents/b1/computer", nil, 404, supervisor.CodeNotFound)
	w.want("POST", "/v1/computers", map[string]any{"agent": "b1", "provider": "fake"}, 404, supervisor.CodeNotFound)
	w.want("POST", "/v1/keys", api.CreateKeyRequest{Name: "x", Scope: "agent", Agent: "b1"}, 404, supervisor.CodeNotFound)
	w.want("POST", "/v1/keys", api.CreateKeyRequest{Name: "x", Scope: "workspace", Workspace: "w2"}, 403, supervisor.CodeForbidden)
	w.want("POST", "/v1/keys", api.CreateKeyRequest{Name: "x", Scope: "operator"}, 403, supervisor.CodeForbidden)
	w.want("POST", "/v1/agents", map[string]any{"name": "x", "workspace": "w2"}, 403, supervisor.CodeForbidden)
	w.want("DELETE", "/v1/workspaces/w2", nil, 404, supervisor.CodeNotFound)
	w.want("GET", "/v1/usage?by=provider", nil, 403, supervisor.CodeForbidden)

	var u api.Usage
	w.mustCall("GET", "/v1/usage", nil, 200, &u)
	if len(u.Rows) != 1 || u.Rows[0].Key != "w1" {
		t.Errorf("usage = %+v, want w1 only", u.Rows)
	}
	// Its own: an agent in its workspace (the default), an agent key for it.
	var ag struct{ Workspace string }
	w.mustCall("POST", "/v1/agents", map[string]any{"id": "a3", "name": "a3"}, 201, &ag)
	if ag.Workspace != "w1" {
		t.Errorf("new agent's workspace = %q, want w1", ag.Workspace)
	}
	var ak api.Key
	w.mustCall("POST", "/v1/keys", api.CreateKeyRequest{Name: "a3", Scope: "agent", Agent: "a3"}, 201, &ak)

	var list api.KeyList
	w.mustCall("GET", "/v1/keys", nil, 200, &list)
	for _, k := range list.Keys {
		if k.Workspace != "w1" || k.Secret != "" {
			t.Errorf("workspace key sees %+v", k)
		}
	}
	if len(list.Keys) != 2 {
		t.Errorf("workspace key sees %d keys, want 2", len(list.Keys))
	}
	w.want("DELETE", "/v1/keys/"+other, nil, 404, supervisor.CodeNotFound)
	w.mustCall("DELETE", "/v1/keys/"+ak.ID, nil, 200, nil)

	w.mustCall("POST", "/v1/companions/pair-codes", nil, 201, nil)

	// Audit: a workspace key sees its own workspace's entries only.
	var log api.AuditLog
	w.mustCall("GET", "/v1/audit", nil, 200, &log)
	var actions []string
	for _, en := range log.Entries {
		if en.Workspace != "w1" {
			t.Errorf("workspace key sees audit entry %+v", en)
		}
		actions = append(actions, en.Action)
	}
	for _, want := range []string{"agent.create", "computer.connect", "key.create", "key.revoke", "pair_code.create"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit actions %v: no %s", actions, want)
		}
	}
	e.mustCall("GET", "/v1/audit", nil, 200, &log)
	var sawW2 bool
	for _, en := range log.Entries {
		sawW2 = sawW2 || en.Workspace == "w2"
		if en.Action == "key.revoke" && en.Target == ak.ID && en.Actor == "operator" {
			t.Errorf("revoke by a workspace key recorded as the operator: %+v", en)
		}
	}
	if !sawW2 {
		t.Error("the operator does not see w2's audit entries")
	}
	w.mustCall("GET", "/v1/audit?limit=1", nil, 200, &log)
	if len(log.Entries) != 1 {
		t.Errorf("limit=1: %d entries", len(log.Entries))
	}
}

func TestKeyRateLimit(t *testing.T) {
	e := newEnv(t)
	e.agentIn("a1", "w1")
	e.h.SetRateLimit(1, 2)
	a := e.as(e.key(api.CreateKeyRequest{Name: "a1", Scope: "agent", Agent: "a1"}).Secret)
	a.mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	a.mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/agents/a1/computer", nil)
	req.Header.Set("Authorization", "Bearer "+a.bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("third call: %d Retry-After %q, want 429 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	a.want("GET", "/v1/agents/a1/computer", nil, 429, supervisor.CodeRateLimited)
	// Another key has its own bucket; the operator token is not limited.
	e.as(e.key(api.CreateKeyRequest{Name: "b", Scope: "agent", Agent: "a1"}).Secret).mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	for range 5 {
		e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, nil)
	}
}

func TestPairLimitPerAddress(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		if st, code := e.anon("POST", "/v1/companions/pair", map[string]string{"code": "ABCD-EFGH-JK"}, nil); st != 403 {
			t.Fatalf("pair %d: %d %s, want 403", i, st, code)
		}
	}
	// The sixth is refused before the code is even looked at: a good code
	// is refused too.
	pc := e.pairCode(nil)
	if st, code := e.anon("POST", "/v1/companions/pair", map[string]string{"code": pc.Code}, nil); st != 429 || code != supervisor.CodeRateLimited {
		t.Fatalf("sixth pair: %d %s, want 429 %s", st, code, supervisor.CodeRateLimited)
	}
}

// A key revoked on one supervisor is refused at once by another sharing
// the PostgreSQL store: keys are read from the store on every request.
func TestRevokedKeyRefusedBySecondSupervisor(t *testing.T) {
	url := pgtest.Start(t)
	open := func() store.Store {
		st, err := sqlstore.OpenPostgres(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	e1, e2 := newEnvWith(t, open()), newEnvWith(t, open())
	e1.mustCall("POST", "/v1/agents", map[string]any{"id": "a1", "name": "a1", "workspace": "w1"}, 201, nil)
	k := e1.key(api.CreateKeyRequest{Name: "w1", Scope: "workspace", Workspace: "w1"})
	e2.as(k.Secret).mustCall("GET", "/v1/keys", nil, 200, nil)
	e1.mustCall("DELETE", "/v1/keys/"+k.ID, nil, 200, nil)
	e2.as(k.Secret).want("GET", "/v1/keys", nil, 401, supervisor.CodeUnauthorized)
}
