package apiserver_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// lendingFake is the fake provider as if its machines were all on the
// machine of one lender.
type lendingFake struct {
	*fake.Provider
	mu      sync.Mutex
	lender  string
	dropped []string
}

func (l *lendingFake) LenderOf(string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lender, l.lender != ""
}

func (l *lendingFake) DropLender(_ context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropped = append(l.dropped, id)
	return nil
}

func (l *lendingFake) LenderState(context.Context, string) (lending.State, error) {
	return lending.State{}, errors.New("the fake lender reports no state")
}

var _ supervisor.LendingProvider = (*lendingFake)(nil)

func TestRevokeCompanion(t *testing.T) {
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	var lf *lendingFake
	e := newEnvWith(t, st, func(c *supervisor.Config) {
		lf = &lendingFake{Provider: c.Providers["fake"].(*fake.Provider)}
		c.Providers["fake"] = lf
	})
	e.agentIn("a1", "w1")
	e.agentIn("a2", "w1")
	pc := e.pairCode(nil)
	var paired supervisor.Paired
	if st, code := e.anon("POST", "/v1/companions/pair", map[string]string{"code": pc.Code, "name": "laptop"}, &paired); st != 201 {
		t.Fatalf("pair: %d %s", st, code)
	}
	lf.mu.Lock()
	lf.lender = paired.LenderID
	lf.mu.Unlock()
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)

	var list api.CompanionList
	e.mustCall("GET", "/v1/companions", nil, 200, &list)
	if len(list.Companions) != 1 || list.Companions[0].ID != paired.LenderID || list.Companions[0].Name != "laptop" {
		t.Fatalf("companions = %+v", list.Companions)
	}
	w := e.as(e.key(api.CreateKeyRequest{Name: "w1", Scope: "workspace", Workspace: "w1"}).Secret)
	w.want("GET", "/v1/companions", nil, 403, supervisor.CodeForbidden)
	w.want("DELETE", "/v1/companions/"+paired.LenderID, nil, 403, supervisor.CodeForbidden)

	var out struct{ EndedSessions int }
	e.mustCall("DELETE", "/v1/companions/"+paired.LenderID, nil, 200, &out)
	if out.EndedSessions != 1 {
		t.Errorf("ended %d sessions, want 1", out.EndedSessions)
	}
	if _, err := e.svc.AuthenticateCompanion(context.Background(), paired.Token); supervisor.AsError(err).Status != 401 {
		t.Errorf("revoked companion's token: %v, want 401", err)
	}
	if lf.dropped == nil || lf.dropped[0] != paired.LenderID {
		t.Errorf("dropped links = %v", lf.dropped)
	}
	var status supervisor.StatusView
	e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, &status)
	if status.Session != nil {
		t.Errorf("session after revoke: %+v", status.Session)
	}
	if _, destroys := lf.Counts(); destroys != 1 {
		t.Errorf("%d machines destroyed, want 1", destroys)
	}
	e.mustCall("GET", "/v1/companions", nil, 200, &list)
	if len(list.Companions) != 0 {
		t.Errorf("companions after revoke = %+v", list.Companions)
	}
	e.want("DELETE", "/v1/companions/"+paired.LenderID, nil, 404, supervisor.CodeNotFound)

	var log api.AuditLog
	e.mustCall("GET", "/v1/audit", nil, 200, &log)
	var actions []string
	for _, en := range log.Entries {
		actions = append(actions, en.Action)
	}
	for _, want := range []string{"pair_code.create", "companion.pair", "companion.revoke"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit actions %v: no %s", actions, want)
		}
	}
}
