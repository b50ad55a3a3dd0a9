package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func testConsoleSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	x := store.ConsoleSession{IDHash: "h1", CSRF: "c1", Actor: "operator", OperatorMark: "m1", CreatedAt: t0, LastUsed: t0}
	if err := s.AddConsoleSession(ctx, x); err != nil {
		t.Fatal(err)
	}
	if err := s.AddConsoleSession(ctx, x); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second session with the same hash: %v, want ErrConflict", err)
	}
	got, err := s.GetConsoleSession(ctx, "h1")
	if err != nil || got != x {
		t.Fatalf("get: %+v %v, want %+v", got, err, x)
	}
	if _, err := s.GetConsoleSession(ctx, "h2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown session: %v, want ErrNotFound", err)
	}
	// Touching moves the last use forward only.
	if err := s.TouchConsoleSession(ctx, "h1", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchConsoleSession(ctx, "h1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetConsoleSession(ctx, "h1"); !got.LastUsed.Equal(t0.Add(time.Hour)) {
		t.Fatalf("last used %v, want %v", got.LastUsed, t0.Add(time.Hour))
	}
	if err := s.SetConsoleFlash(ctx, "h1", "Done."); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetConsoleSession(ctx, "h1"); got.Flash != "Done." {
		t.Fatalf("flash %q", got.Flash)
	}
	old := store.ConsoleSession{IDHash: "h0", CSRF: "c0", Actor: "k_1", CreatedAt: t0, LastUsed: t0}
	if err := s.AddConsoleSession(ctx, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeConsoleSessions(ctx, t0.Add(30*time.Minute)); err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want the one idle since %v", n, err, t0)
	}
	if _, err := s.GetConsoleSession(ctx, "h0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("purged session: %v", err)
	}
	if err := s.DeleteConsoleSession(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConsoleSession(ctx, "h1"); err != nil {
		t.Fatalf("deleting a gone session: %v", err)
	}
	if _, err := s.GetConsoleSession(ctx, "h1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted session: %v", err)
	}
}
