package ledger

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// TestLedger records sessions and sums them by day, agent and workspace,
// counting running sessions up to now and every session at most to its
// expiry; the file keeps them across a reopen.
func TestLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), FileName)
	l, err := OpenFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	add := func(id, agent, ws, day string, start time.Time, lease time.Duration) {
		t.Helper()
		if err := l.Begin(ctx, Session{ComputerID: id, SessionID: "s_" + id, AttemptID: "a_" + id, Agent: agent, Workspace: ws,
			Image: "headless", Deployment: "dep", Day: day, StartedAt: start, ExpiresAt: start.Add(lease)}); err != nil {
			t.Fatal(err)
		}
	}
	add("c1", "alice", "lab", "2026-11-29", t0.Add(-24*time.Hour), 15*time.Minute)
	add("c2", "alice", "lab", "2026-11-30", t0, 15*time.Minute)
	add("c3", "bob", "ops", "2026-11-30", t0.Add(time.Minute), 15*time.Minute)
	add("c4", "bob", "ops", "2026-11-30", t0.Add(2*time.Minute), 15*time.Minute)
	if err := l.Begin(ctx, Session{ComputerID: "c2", Day: "2026-11-30"}); err == nil {
		t.Fatal("a second open session for c2 was accepted")
	}
	// c1 ran past its expiry: charged 900 s. c2 stopped after 100 s.
	if ok, err := l.End(ctx, "c1", t0, "expired"); !ok || err != nil {
		t.Fatalf("end c1: %v %v", ok, err)
	}
	if ok, _ := l.End(ctx, "c1", t0, "again"); ok {
		t.Fatal("ended twice")
	}
	l.End(ctx, "c2", t0.Add(100*time.Second), "stopped")
	if err := l.Forget(ctx, "c4"); err != nil { // its create failed
		t.Fatal(err)
	}
	now := t0.Add(5 * time.Minute) // c3 has run 240 s
	if n, err := l.DaySeconds(ctx, "2026-11-30", now); err != nil || n != 340 {
		t.Fatalf("today: %d %v, want 340", n, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = OpenFile(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	days, agents, wss, err := l.Totals(ctx, "2026-11-16", "2026-11-30", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 2 || days[0] != (Row{"2026-11-29", 900, 1}) || days[1] != (Row{"2026-11-30", 340, 2}) {
		t.Fatalf("days %+v", days)
	}
	if len(agents) != 2 || agents[0] != (Row{"alice", 1000, 2}) || agents[1] != (Row{"bob", 240, 1}) {
		t.Fatalf("agents %+v", agents)
	}
	if len(wss) != 2 || wss[0].Key != "lab" || wss[1] != (Row{"ops", 240, 1}) {
		t.Fatalf("workspaces %+v", wss)
	}
	open, err := l.OpenSessions(ctx)
	if err != nil || len(open) != 1 || open[0].ComputerID != "c3" {
		t.Fatalf("open %+v %v", open, err)
	}
	s, err := l.Get(ctx, "c1")
	if err != nil || s.Seconds != 900 || s.EndReason != "expired" || !s.ExpiresAt.Equal(t0.Add(-24*time.Hour+15*time.Minute)) {
		t.Fatalf("c1 %+v %v", s, err)
	}
	if _, err := l.Get(ctx, "nope"); err != ErrNotFound {
		t.Fatalf("unknown: %v", err)
	}
	if err := l.Keep(ctx, "volume", "v1", now); err != nil {
		t.Fatal(err)
	}
	if k, _ := l.Kept(ctx, "volume", "v1"); !k {
		t.Fatal("kept volume forgotten")
	}
	if k, _ := l.Kept(ctx, "network", "v1"); k {
		t.Fatal("kept by name only, not kind")
	}
}
