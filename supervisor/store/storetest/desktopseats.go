package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// testDesktopSeats: a session's desktop seats limit holders at once; a
// holder seated already keeps its seat with the new expiry; the refusal
// says how many are held, the limit and when the first of them frees; a
// lapsed seat frees its place; desktop seats and viewer seats count apart;
// a connection's desktopUsers is stored, 1 when left out.
func testDesktopSeats(t *testing.T, s store.Store) {
	ctx := testContext(t)
	s1 := seatSession(t, s, "d1")
	take := func(holder string, expires, now time.Time, limit, want int) {
		t.Helper()
		held, err := s.TakeDesktopSeat(ctx, s1, holder, expires, now, limit)
		if err != nil || held != want {
			t.Fatalf("take desktop seat %s at %s: held %d, %v; want %d", holder, now.Format(time.TimeOnly), held, err, want)
		}
	}
	take("a", at(time.Minute), t0, 1, 1)
	take("a", at(2*time.Minute), at(30*time.Second), 1, 1) // a seated holder keeps its seat

	_, err := s.TakeDesktopSeat(ctx, s1, "b", at(3*time.Minute), at(time.Minute), 1)
	var full *store.SeatsFullError
	if !errors.As(err, &full) || full.Held != 1 || full.Limit != 1 || !full.FreesAt.Equal(at(2*time.Minute)) || full.Kind != "desktop" {
		t.Fatalf("a second holder of one seat: %v (%+v); want a SeatsFullError of 1 held, limit 1, freeing at %s", err, full, at(2*time.Minute))
	}
	if !errors.Is(err, store.ErrSeatsFull) {
		t.Errorf("%v is not ErrSeatsFull", err)
	}
	// Viewers of live view count apart.
	takeSeat(t, s, s1, "a", at(3*time.Minute), at(time.Minute), 1, 1)
	takeSeat(t, s, s1, "v", at(3*time.Minute), at(time.Minute), 2, 2)

	// With two seats a second holder gets one; the first frees at its
	// expiry, not before.
	take("b", at(3*time.Minute), at(time.Minute), 2, 2)
	if _, err := s.TakeDesktopSeat(ctx, s1, "c", at(4*time.Minute), at(2*time.Minute).Add(-time.Millisecond), 2); !errors.Is(err, store.ErrSeatsFull) {
		t.Fatalf("a third holder just before the first seat lapses: %v, want ErrSeatsFull", err)
	}
	take("c", at(4*time.Minute), at(2*time.Minute), 2, 2)

	_, err = s.TakeDesktopSeat(ctx, "s-nobody", "a", at(time.Minute), t0, 1)
	wantErr(t, err, store.ErrNotFound, "a desktop seat at a session that does not exist")
	if _, err := s.TakeDesktopSeat(ctx, s1, "d", at(time.Minute), t0, 0); err == nil {
		t.Error("took a desktop seat with a limit of 0")
	}

	// The purge deletes the lapsed desktop seats only.
	n, err := s.PurgeDesktopSeats(ctx, at(3*time.Minute)) // b expires exactly then; c holds on
	if err != nil || n != 1 {
		t.Errorf("purge desktop seats: %d, %v; want 1", n, err)
	}
	checkHeld(t, s, s1, at(time.Minute), 2) // the viewers' seats stay

	c, err := s.GetConnection(ctx, "d1")
	if err != nil || c.DesktopUsers != 1 {
		t.Errorf("a connection written without desktopUsers: %+v, %v; want 1", c, err)
	}
	if err := s.CreateAgent(ctx, store.Agent{ID: "d2", Name: "d2", Workspace: "ws", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateConnection(ctx, store.Connection{AgentID: "d2", Provider: "docker", Image: "desktop", LeaseSeconds: 300,
		DailySeconds: 3600, DesktopUsers: 4, CreatedAt: t0, Credentials: []byte("sealed")}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.GetConnection(ctx, "d2"); err != nil || c.DesktopUsers != 4 {
		t.Errorf("a connection with desktopUsers 4: %+v, %v", c, err)
	}
}
