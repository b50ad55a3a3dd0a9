package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func testReserveGrantsLease(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "research", "e2b", 300, 1000)
	now := at(1234 * time.Millisecond)
	got := reserve(t, s, "a1", "s1", now)
	want := store.Session{
		ID: "s1", AgentID: "a1", Workspace: "research", Provider: "e2b", Image: "headless",
		ComputerID: "c-s1", AttemptID: "a-s1", State: store.StateStarting, Day: "2026-03-10",
		ReservedSeconds: 300, CreatedAt: now, ExpiresAt: now.Add(300 * time.Second),
	}
	if d := diffSession(got, want); d != "" {
		t.Errorf("Reserve returned: %s", d)
	}
	checkStored(t, s, want)
	live, err := s.LiveSession(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSession(live, want); d != "" {
		t.Errorf("LiveSession: %s", d)
	}
	b := budget(t, s, "a1", now)
	checkBudget(t, b, "2026-03-10", 1000, 0, 300, 700)
	if want := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC); !b.ResetsAt.Equal(want) {
		t.Errorf("budget resets at %s, want %s", b.ResetsAt, want)
	}

	// The caller's image wins over the connection's.
	connect(t, s, "a2", "research", "docker", 300, 1000)
	r := reservation("a2", "s2", now)
	r.Session.Image = "desktop"
	x, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if x.Image != "desktop" {
		t.Errorf("image %q, want the reservation's desktop", x.Image)
	}

	_, err = s.LiveSession(ctx, "a3")
	wantErr(t, err, store.ErrNotFound, "live session of an unknown agent")

	// The live session of a computer; none once it has ended.
	byComputer, err := s.LiveComputer(ctx, "c-s1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSession(byComputer, want); d != "" {
		t.Errorf("LiveComputer: %s", d)
	}
	_, err = s.LiveComputer(ctx, "c-nope")
	wantErr(t, err, store.ErrNotFound, "live session of an unknown computer")
	ended := byComputer
	ended.State, ended.EndedAt = store.StateStopped, now.Add(time.Minute)
	if err := s.UpdateSession(ctx, ended, store.StateStarting); err != nil {
		t.Fatal(err)
	}
	_, err = s.LiveComputer(ctx, "c-s1")
	wantErr(t, err, store.ErrNotFound, "live session of an ended computer")
	_, err = s.GetSession(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "unknown session")
}

func testReserveLive(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 3000)
	first := reserve(t, s, "a1", "s1", t0)
	for _, state := range []string{store.StateStarting, store.StateRunning, store.StateUncertain} {
		if first.State != state {
			move(t, s, &first, state)
		}
		got, err := s.Reserve(ctx, reservation("a1", "s2", at(time.Second)))
		wantErr(t, err, store.ErrLive, "reserve while a session is "+state)
		if got.ID != first.ID || got.State != state {
			t.Errorf("ErrLive came with session %s (%s), want %s (%s)", got.ID, got.State, first.ID, state)
		}
		_, err = s.GetSession(ctx, "s2")
		wantErr(t, err, store.ErrNotFound, "a refused reservation's session")
	}
	checkBudget(t, budget(t, s, "a1", t0), "2026-03-10", 3000, 0, 300, 2700)

	// Stopping frees the slot; stopping may still be cleaning up, but the
	// next session can start.
	first.ChargedSeconds = 100
	move(t, s, &first, store.StateStopping)
	if _, err := s.LiveSession(ctx, "a1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("live session while stopping: %v, want ErrNotFound", err)
	}
	second := reserve(t, s, "a1", "s2", at(2*time.Second))
	if second.ReservedSeconds != 300 {
		t.Errorf("second session reserved %d s, want 300", second.ReservedSeconds)
	}
}

func testReserveGrantsWhatIsLeft(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 700)
	for i, now := range []time.Time{at(0), at(10 * time.Minute)} {
		x := reserve(t, s, "a1", fmt.Sprintf("s%d", i), now)
		if x.ReservedSeconds != 300 {
			t.Fatalf("session %d reserved %d s, want 300", i, x.ReservedSeconds)
		}
		end(t, s, &x, 300, now.Add(300*time.Second))
	}
	checkBudget(t, budget(t, s, "a1", at(time.Hour)), "2026-03-10", 700, 600, 0, 100)

	now := at(time.Hour)
	x := reserve(t, s, "a1", "s-last", now)
	if x.ReservedSeconds != 100 || !x.ExpiresAt.Equal(now.Add(100*time.Second)) {
		t.Errorf("got %d s until %s, want the 100 s left, until %s", x.ReservedSeconds, x.ExpiresAt, now.Add(100*time.Second))
	}
	checkBudget(t, budget(t, s, "a1", now), "2026-03-10", 700, 600, 100, 0)
	end(t, s, &x, 100, now.Add(100*time.Second))

	_, err := s.Reserve(ctx, reservation("a1", "s-over", at(2*time.Hour)))
	var be *store.BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("reserve with nothing left: %v, want *store.BudgetError", err)
	}
	want := store.BudgetError{LeftSeconds: 0, MinSeconds: minSeconds, ResetsAt: time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)}
	if be.LeftSeconds != want.LeftSeconds || be.MinSeconds != want.MinSeconds || !be.ResetsAt.Equal(want.ResetsAt) {
		t.Errorf("budget error %+v, want %+v", *be, want)
	}
	_, err = s.GetSession(ctx, "s-over")
	wantErr(t, err, store.ErrNotFound, "a refused reservation's session")
}

func testReserveBelowMinimum(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 350)
	x := reserve(t, s, "a1", "s1", t0)
	end(t, s, &x, 300, at(300*time.Second))

	now := at(time.Hour)
	_, err := s.Reserve(ctx, reservation("a1", "s2", now))
	var be *store.BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("reserve with 50 s left: %v, want *store.BudgetError", err)
	}
	if be.LeftSeconds != 50 || be.MinSeconds != minSeconds || !be.ResetsAt.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("budget error %+v, want 50 s left, minimum %d, reset at midnight UTC", *be, minSeconds)
	}
	if !strings.Contains(be.Error(), "50") {
		t.Errorf("budget error message %q does not say what is left", be.Error())
	}

	// A smaller minimum takes what is left.
	r := reservation("a1", "s3", now)
	r.MinSeconds = 50
	got, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatalf("reserve with minimum 50: %v", err)
	}
	if got.ReservedSeconds != 50 {
		t.Errorf("reserved %d s, want 50", got.ReservedSeconds)
	}
}

func testStopGivesTimeBack(t *testing.T, s store.Store) {
	connect(t, s, "a1", "default", "docker", 300, 1000)
	x := reserve(t, s, "a1", "s1", t0)
	checkBudget(t, budget(t, s, "a1", t0), "2026-03-10", 1000, 0, 300, 700)
	x.MachineID = "m-1"
	move(t, s, &x, store.StateRunning)
	checkBudget(t, budget(t, s, "a1", at(time.Minute)), "2026-03-10", 1000, 0, 300, 700)

	// Stopped after 120 s: the charge counts, the rest of the reservation
	// comes back at once, while the machine is still being removed.
	x.ChargedSeconds = 120
	move(t, s, &x, store.StateStopping)
	checkBudget(t, budget(t, s, "a1", at(2*time.Minute)), "2026-03-10", 1000, 120, 0, 880)
	x.EndedAt = at(2 * time.Minute)
	move(t, s, &x, store.StateStopped)
	checkBudget(t, budget(t, s, "a1", at(3*time.Minute)), "2026-03-10", 1000, 120, 0, 880)

	// An expired session counts its charge.
	y := reserve(t, s, "a1", "s2", at(10*time.Minute))
	move(t, s, &y, store.StateRunning)
	y.ChargedSeconds = 300
	move(t, s, &y, store.StateExpired)
	checkBudget(t, budget(t, s, "a1", at(20*time.Minute)), "2026-03-10", 1000, 420, 0, 580)

	// So does one whose cleanup keeps failing.
	z := reserve(t, s, "a1", "s3", at(30*time.Minute))
	z.ChargedSeconds = 60
	move(t, s, &z, store.StateStopping)
	z.CleanupTries = 3
	move(t, s, &z, store.StateCleanupFailed)
	checkBudget(t, budget(t, s, "a1", at(40*time.Minute)), "2026-03-10", 1000, 480, 0, 520)

	// What is left is what the next reservation may take.
	w := reserve(t, s, "a1", "s4", at(50*time.Minute))
	if w.ReservedSeconds != 300 {
		t.Errorf("reserved %d s, want 300", w.ReservedSeconds)
	}
	checkBudget(t, budget(t, s, "a1", at(50*time.Minute)), "2026-03-10", 1000, 480, 300, 220)
}

func testDayOfCreation(t *testing.T, s store.Store) {
	connect(t, s, "a1", "default", "docker", 300, 300)
	// 18:58 in New York is 23:58 UTC: the session counts on March 10th.
	ny := time.FixedZone("EST", -5*3600)
	start := time.Date(2026, 3, 10, 18, 58, 0, 0, ny)
	x := reserve(t, s, "a1", "s1", start)
	if x.Day != "2026-03-10" {
		t.Errorf("session day %s, want 2026-03-10 (the UTC day)", x.Day)
	}
	if want := time.Date(2026, 3, 11, 0, 3, 0, 0, time.UTC); !x.ExpiresAt.Equal(want) {
		t.Errorf("expires at %s, want %s", x.ExpiresAt, want)
	}
	b := budget(t, s, "a1", start)
	checkBudget(t, b, "2026-03-10", 300, 0, 300, 0)
	if want := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC); !b.ResetsAt.Equal(want) {
		t.Errorf("resets at %s, want %s", b.ResetsAt, want)
	}
	// Past midnight the running session still counts on the day before.
	after := time.Date(2026, 3, 11, 0, 1, 0, 0, time.UTC)
	checkBudget(t, budget(t, s, "a1", after), "2026-03-11", 300, 0, 0, 300)

	end(t, s, &x, 300, time.Date(2026, 3, 11, 0, 3, 0, 0, time.UTC))
	checkBudget(t, budget(t, s, "a1", start), "2026-03-10", 300, 300, 0, 0)
	checkBudget(t, budget(t, s, "a1", after), "2026-03-11", 300, 0, 0, 300)
	y := reserve(t, s, "a1", "s2", time.Date(2026, 3, 11, 0, 4, 0, 0, time.UTC))
	if y.ReservedSeconds != 300 || y.Day != "2026-03-11" {
		t.Errorf("next day's session: %d s on %s, want 300 s on 2026-03-11", y.ReservedSeconds, y.Day)
	}
}

func testMidnightReset(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 300)
	x := reserve(t, s, "a1", "s1", at(time.Hour))
	end(t, s, &x, 300, at(time.Hour+5*time.Minute))

	lastMoment := time.Date(2026, 3, 10, 23, 59, 59, 999e6, time.UTC)
	_, err := s.Reserve(ctx, reservation("a1", "s2", lastMoment))
	var be *store.BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("reserve at the day's last moment: %v, want *store.BudgetError", err)
	}
	if want := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC); !be.ResetsAt.Equal(want) {
		t.Errorf("resets at %s, want %s", be.ResetsAt, want)
	}

	midnight := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)
	y := reserve(t, s, "a1", "s3", midnight)
	if y.ReservedSeconds != 300 {
		t.Errorf("reserved %d s at midnight, want the full 300", y.ReservedSeconds)
	}
	checkBudget(t, budget(t, s, "a1", midnight), "2026-03-11", 300, 0, 300, 0)
	checkBudget(t, budget(t, s, "a1", lastMoment), "2026-03-10", 300, 300, 0, 0)
}
