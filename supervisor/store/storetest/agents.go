package storetest

import (
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func testAgents(t *testing.T, s store.Store) {
	ctx := testContext(t)
	a := store.Agent{ID: "a1", Name: "Agent One", Workspace: "research", CreatedAt: at(1500 * time.Millisecond)}
	if err := s.CreateAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgent(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.Name != a.Name || got.Workspace != a.Workspace || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Errorf("GetAgent = %+v, want %+v", got, a)
	}
	err = s.CreateAgent(ctx, store.Agent{ID: "a1", Name: "Impostor", Workspace: "other", CreatedAt: t0})
	wantErr(t, err, store.ErrConflict, "second agent with one id")
	if got, _ := s.GetAgent(ctx, "a1"); got.Name != a.Name || got.Workspace != a.Workspace {
		t.Errorf("a refused CreateAgent changed the agent: %+v", got)
	}
	_, err = s.GetAgent(ctx, "nobody")
	wantErr(t, err, store.ErrNotFound, "unknown agent")

	if err := s.CreateAgent(ctx, store.Agent{ID: "a2", Name: "Agent Two", Workspace: "research", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAgent(ctx, store.Agent{ID: "b1", Name: "Elsewhere", Workspace: "ops", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	in, err := s.AgentsIn(ctx, "research")
	if err != nil || len(in) != 2 || in[0].ID != "a1" || in[1].ID != "a2" {
		t.Errorf("AgentsIn(research) = %+v, %v; want a1, a2", in, err)
	}
	all, err := s.Agents(ctx)
	if err != nil || len(all) != 3 || all[0].ID != "a1" || all[1].ID != "a2" || all[2].ID != "b1" {
		t.Errorf("Agents = %+v, %v; want a1, a2, b1", all, err)
	}
	if err := s.DeleteAgent(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.DeleteAgent(ctx, "a2"), store.ErrNotFound, "deleting a deleted agent")
	if in, _ := s.AgentsIn(ctx, "research"); len(in) != 1 {
		t.Errorf("AgentsIn after delete = %+v", in)
	}
}

func testConnections(t *testing.T, s store.Store) {
	ctx := testContext(t)
	if err := s.CreateAgent(ctx, store.Agent{ID: "a1", Name: "one", Workspace: "default", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetConnection(ctx, "a1")
	wantErr(t, err, store.ErrNotFound, "connection before connecting")
	_, err = s.Budget(ctx, "a1", t0)
	wantErr(t, err, store.ErrNotFound, "budget without a connection")
	_, err = s.Reserve(ctx, reservation("a1", "s1", t0))
	wantErr(t, err, store.ErrNotFound, "reserve without a connection")

	c := store.Connection{AgentID: "a1", Provider: "e2b", Image: "desktop", LeaseSeconds: 600, DailySeconds: 3600,
		CreatedAt: at(time.Second), Credentials: []byte("AQIDBAUGBwgJCgsMDQ4PEA")}
	if err := s.CreateConnection(ctx, c); err != nil {
		t.Fatal(err)
	}
	if all, err := s.Connections(ctx); err != nil || len(all) != 1 || all[0].AgentID != "a1" || all[0].Provider != "e2b" {
		t.Errorf("Connections = %+v, %v", all, err)
	}
	check := func(want store.Connection) {
		t.Helper()
		got, err := s.GetConnection(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if got.AgentID != want.AgentID || got.Provider != want.Provider || got.Image != want.Image ||
			got.LeaseSeconds != want.LeaseSeconds || got.DailySeconds != want.DailySeconds ||
			!got.CreatedAt.Equal(want.CreatedAt) || string(got.Credentials) != string(want.Credentials) {
			t.Errorf("GetConnection = %+v (credentials %q), want %+v (credentials %q)",
				got, got.Credentials, want, want.Credentials)
		}
	}
	check(c)
	second := c
	second.Provider = "docker"
	wantErr(t, s.CreateConnection(ctx, second), store.ErrConflict, "second connection")
	check(c)
	if err := s.SetConnectionLimits(ctx, "a1", 300, 1200); err != nil {
		t.Fatal(err)
	}
	c.LeaseSeconds, c.DailySeconds = 300, 1200
	check(c)
	wantErr(t, s.SetConnectionLimits(ctx, "nobody", 300, 1200), store.ErrNotFound, "limits of an unknown connection")

	if err := s.DeleteConnection(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetConnection(ctx, "a1")
	wantErr(t, err, store.ErrNotFound, "connection after delete")
	wantErr(t, s.DeleteConnection(ctx, "a1"), store.ErrNotFound, "second delete")
	wantErr(t, s.DeleteConnection(ctx, "nobody"), store.ErrNotFound, "delete for an unknown agent")

	// The agent can connect again.
	if err := s.CreateConnection(ctx, second); err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	check(second)
}
