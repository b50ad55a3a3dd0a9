package storetest

import (
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func testKeys(t *testing.T, s store.Store) {
	ctx := testContext(t)
	ws := store.Key{ID: "k-ws", Name: "research team", Scope: store.ScopeWorkspace, Workspace: "research", Hash: "h-ws",
		CreatedAt: t0, ExpiresAt: at(24 * time.Hour), CreatedBy: "operator"}
	ag := store.Key{ID: "k-ag", Name: "bot", Scope: store.ScopeAgent, Workspace: "research", AgentID: "a1", Hash: "h-ag",
		CreatedAt: at(time.Minute), CreatedBy: "k-ws"}
	other := store.Key{ID: "k-other", Name: "ops", Scope: store.ScopeWorkspace, Workspace: "ops", Hash: "h-other", CreatedAt: at(2 * time.Minute)}
	for _, k := range []store.Key{ws, ag, other} {
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatalf("create key %s: %v", k.ID, err)
		}
	}
	wantErr(t, s.CreateKey(ctx, ws), store.ErrConflict, "second key with one id")

	got, err := s.GetKey(ctx, "k-ws")
	if err != nil {
		t.Fatal(err)
	}
	if got != ws {
		t.Errorf("GetKey = %+v, want %+v", got, ws)
	}
	_, err = s.GetKey(ctx, "k-none")
	wantErr(t, err, store.ErrNotFound, "unknown key")

	list, err := s.ListKeys(ctx, "research")
	if err != nil || len(list) != 2 || list[0].ID != "k-ws" || list[1] != ag {
		t.Errorf("ListKeys(research) = %+v %v, want k-ws and k-ag", list, err)
	}
	if all, err := s.ListKeys(ctx, ""); err != nil || len(all) != 3 {
		t.Errorf("ListKeys() = %d keys %v, want 3", len(all), err)
	}

	if err := s.TouchKey(ctx, "k-ag", at(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "k-ag", at(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "k-ag", at(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.RevokeKey(ctx, "k-none", at(time.Hour)), store.ErrNotFound, "revoke an unknown key")
	got, err = s.GetKey(ctx, "k-ag")
	if err != nil || !got.LastUsedAt.Equal(at(time.Hour)) || !got.RevokedAt.Equal(at(2*time.Hour)) {
		t.Errorf("after touch and two revokes: %+v %v, want last use at 1h, revoked at 2h", got, err)
	}
}

func testAudit(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for i, e := range []store.AuditEntry{
		{ID: "e1", At: at(time.Minute), Actor: "operator", Workspace: "research", Action: "connect", Target: "a1", Detail: "docker"},
		{ID: "e2", At: at(2 * time.Minute), Actor: "k-ws", Workspace: "research", Action: "key.create", Target: "k-ag"},
		{ID: "e3", At: at(3 * time.Minute), Actor: "operator", Workspace: "ops", Action: "disconnect", Target: "a9"},
	} {
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	got, err := s.Audit(ctx, "research", time.Time{}, 10)
	if err != nil || len(got) != 2 || got[0].ID != "e2" || got[1].ID != "e1" {
		t.Fatalf("Audit(research) = %+v %v, want e2 then e1", got, err)
	}
	if got[1].Actor != "operator" || got[1].Action != "connect" || got[1].Target != "a1" || got[1].Detail != "docker" || !got[1].At.Equal(at(time.Minute)) {
		t.Errorf("entry e1 = %+v", got[1])
	}
	if all, err := s.Audit(ctx, "", time.Time{}, 2); err != nil || len(all) != 2 || all[0].ID != "e3" {
		t.Errorf("Audit(all, 2) = %+v %v, want e3 first", all, err)
	}
	if older, err := s.Audit(ctx, "", at(2*time.Minute), 10); err != nil || len(older) != 1 || older[0].ID != "e1" {
		t.Errorf("Audit before 2m = %+v %v, want e1", older, err)
	}
}

func testCompanions(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for i, id := range []string{"cp-a", "cp-b"} {
		if err := s.CreatePairCode(ctx, store.PairCode{Hash: "code-" + id, CreatedAt: t0, ExpiresAt: at(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		c := companion(id)
		c.CreatedAt = at(time.Duration(i) * time.Minute)
		if _, err := s.RedeemPairCode(ctx, "code-"+id, at(time.Minute), c); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.Companions(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "cp-a" || list[1].ID != "cp-b" {
		t.Fatalf("Companions = %+v %v", list, err)
	}
	if err := s.DeleteCompanion(ctx, "cp-a"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.DeleteCompanion(ctx, "cp-a"), store.ErrNotFound, "delete a deleted companion")
	_, err = s.CompanionByTokenHash(ctx, "tok-hash-cp-a")
	wantErr(t, err, store.ErrNotFound, "token of a deleted companion")
	if list, err := s.Companions(ctx); err != nil || len(list) != 1 || list[0].ID != "cp-b" {
		t.Errorf("Companions after delete = %+v %v", list, err)
	}
}
