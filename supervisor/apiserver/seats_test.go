package apiserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor"
)

// TestReaperPurgesLapsedSeats: the reaper deletes the viewer seats that
// lapsed, of desktops nobody takes a seat at any more, and keeps the
// seats still held.
func TestReaperPurgesLapsedSeats(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 600, 1000)
	var s supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
	ctx := context.Background()
	now := e.clock.Now()
	for viewer, d := range map[string]time.Duration{"w1": time.Minute, "w2": 3 * time.Minute} {
		if _, err := e.st.TakeSeat(ctx, s.ID, viewer, now.Add(d), now, 2); err != nil {
			t.Fatalf("take seat %s: %v", viewer, err)
		}
	}
	e.clock.Advance(2 * time.Minute) // w1's seat lapsed
	e.svc.Reap(ctx)
	// What is left to purge at the same instant: nothing, the reaper did.
	if n, err := e.st.PurgeSeats(ctx, e.clock.Now()); err != nil || n != 0 {
		t.Errorf("seats left to purge after the reaper ran: %d, %v; want 0", n, err)
	}
	if ok, err := e.st.Seated(ctx, s.ID, "w2", e.clock.Now()); err != nil || !ok {
		t.Errorf("a held seat after the reaper ran: seated %v, %v; want seated", ok, err)
	}
}
