package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func testUpdateSession(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 1000)
	x := reserve(t, s, "a1", "s1", t0)
	if ok, err := s.ClaimSession(ctx, "s1", "sup-1", t0, at(time.Minute)); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	x.Owner, x.ClaimUntil = "sup-1", at(time.Minute)

	x.MachineID, x.Endpoint, x.Header = "m-42", "http://10.0.0.7:7070", `{"X-Token":["t"]}`
	move(t, s, &x, store.StateRunning)
	checkStored(t, s, x)

	// A writer that still thinks the session is starting loses.
	stale := x
	stale.State, stale.MachineID = store.StateUncertain, "m-other"
	wantErr(t, s.UpdateSession(ctx, stale, store.StateStarting), store.ErrStale, "update from a past state")
	checkStored(t, s, x)

	x.ChargedSeconds, x.ReservedSeconds = 200, 250
	x.ExpiresAt, x.EndedAt = at(250*time.Second), at(200*time.Second)
	x.CleanupTries, x.NextCleanupAt, x.LastError = 2, at(10*time.Minute), "delete: 503 Service Unavailable"
	move(t, s, &x, store.StateCleanupFailed)
	checkStored(t, s, x) // the claim stays as ClaimSession left it

	ghost := x
	ghost.ID = "ghost"
	if err := s.UpdateSession(ctx, ghost, store.StateCleanupFailed); err == nil {
		t.Error("update of an unknown session succeeded")
	}
}

func testUpdateSessionConcurrent(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 1000)
	x := reserve(t, s, "a1", "s1", t0)
	const writers = 20
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			y := x
			y.State = store.StateRunning
			y.MachineID = fmt.Sprintf("m-%d", i)
			errs[i] = s.UpdateSession(ctx, y, store.StateStarting)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both moved the session from starting", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrStale):
			t.Errorf("writer %d: %v, want ErrStale", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer moved the session")
	}
	got, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("m-%d", winner); got.MachineID != want || got.State != store.StateRunning {
		t.Errorf("stored %s/%s, want the winner's %s/running", got.MachineID, got.State, want)
	}
}

func testSessionsDue(t *testing.T, s store.Store) {
	ctx := testContext(t)
	type setup struct {
		agent, state string
		lease        int
		nextCleanup  time.Duration
	}
	now := at(300 * time.Second)
	for _, c := range []setup{
		{"expired", store.StateRunning, 300, 0},                   // expires exactly now: due
		{"running", store.StateRunning, 600, 0},                   // expires later
		{"stopping", store.StateStopping, 300, 100 * time.Second}, // cleanup due
		{"failed-due", store.StateCleanupFailed, 300, 300 * time.Second},
		{"failed-later", store.StateCleanupFailed, 300, 400 * time.Second},
		{"stopping-later", store.StateStopping, 300, 301 * time.Second},
		{"starting", store.StateStarting, 300, 0}, // past expiry, but still starting
		{"stopped", store.StateStopped, 300, 0},
	} {
		connect(t, s, c.agent, "default", "docker", c.lease, 1000)
		x := reserve(t, s, c.agent, c.agent, t0)
		switch c.state {
		case store.StateStarting:
		case store.StateRunning:
			move(t, s, &x, store.StateRunning)
		case store.StateStopped:
			end(t, s, &x, 10, at(10*time.Second))
		default:
			x.NextCleanupAt = at(c.nextCleanup)
			if c.state == store.StateCleanupFailed {
				move(t, s, &x, store.StateStopping)
			}
			move(t, s, &x, c.state)
		}
	}
	due, err := s.SessionsDue(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"expired", "failed-due", "stopping"}
	if got := ids(due); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("due at %s: %v, want %v", now, got, want)
	}
	for _, x := range due {
		if x.AgentID != x.ID || x.Provider != "docker" {
			t.Errorf("due session %s came back incomplete: %+v", x.ID, x)
		}
	}
	some, err := s.SessionsDue(ctx, now, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != 2 {
		t.Errorf("limit 2 gave %d sessions", len(some))
	}
	for _, x := range some {
		if x.ID != "expired" && x.ID != "failed-due" && x.ID != "stopping" {
			t.Errorf("limited list has %s, which is not due", x.ID)
		}
	}
	early, err := s.SessionsDue(ctx, at(99*time.Second), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(early) != 0 {
		t.Errorf("due before anything is: %v", ids(early))
	}
}

func testSessionsByState(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for i, state := range []string{store.StateStarting, store.StateRunning, store.StateRunning, store.StateUncertain, store.StateStopped} {
		agent := fmt.Sprintf("a%d", i)
		connect(t, s, agent, "default", "docker", 300, 1000)
		x := reserve(t, s, agent, "s"+agent, at(time.Duration(i)*time.Second))
		switch state {
		case store.StateStopped:
			end(t, s, &x, 5, at(time.Minute))
		case store.StateStarting:
		default:
			move(t, s, &x, state)
		}
	}
	for _, c := range []struct {
		states []string
		want   string
	}{
		{[]string{store.StateRunning}, "sa1,sa2"},
		{[]string{store.StateStarting, store.StateUncertain}, "sa0,sa3"},
		{[]string{store.StateStopped, store.StateRunning}, "sa1,sa2,sa4"},
		{[]string{store.StateCleanupFailed}, ""},
		{nil, ""},
	} {
		got, err := s.SessionsByState(ctx, c.states...)
		if err != nil {
			t.Fatalf("sessions in %v: %v", c.states, err)
		}
		if g := strings.Join(ids(got), ","); g != c.want {
			t.Errorf("sessions in %v: %s, want %s", c.states, g, c.want)
		}
		for _, x := range got {
			if x.Day != "2026-03-10" || x.ReservedSeconds != 300 {
				t.Errorf("session %s came back incomplete: %+v", x.ID, x)
			}
		}
	}
}

func testUsage(t *testing.T, s store.Store) {
	ctx := testContext(t)
	from, to := t0, at(time.Hour)
	now := at(70 * time.Second)

	connect(t, s, "ended", "alpha", "docker", 300, 1000)
	x := reserve(t, s, "ended", "s-ended", from) // created exactly at from: counts
	end(t, s, &x, 100, at(100*time.Second))

	connect(t, s, "live", "beta", "e2b", 300, 1000)
	y := reserve(t, s, "live", "s-live", at(10*time.Second)) // 60 s so far
	move(t, s, &y, store.StateRunning)

	connect(t, s, "overdue", "alpha", "e2b", 60, 1000)
	z := reserve(t, s, "overdue", "s-overdue", at(5*time.Second)) // ran past its expiry: capped at 60 s
	move(t, s, &z, store.StateRunning)

	connect(t, s, "starting", "beta", "docker", 300, 1000)
	reserve(t, s, "starting", "s-starting", at(40*time.Second)) // 30 s so far

	connect(t, s, "before", "beta", "docker", 300, 1000)
	b := reserve(t, s, "before", "s-before", at(-time.Second))
	end(t, s, &b, 50, at(49*time.Second))

	connect(t, s, "after", "alpha", "docker", 300, 1000)
	reserve(t, s, "after", "s-after", to) // created exactly at to: left out

	for _, c := range []struct {
		by   string
		want map[string]store.UsageRow
	}{
		{"provider", map[string]store.UsageRow{
			"docker": {Key: "docker", Seconds: 130, Sessions: 2},
			"e2b":    {Key: "e2b", Seconds: 120, Sessions: 2},
		}},
		{"workspace", map[string]store.UsageRow{
			"alpha": {Key: "alpha", Seconds: 160, Sessions: 2},
			"beta":  {Key: "beta", Seconds: 90, Sessions: 2},
		}},
	} {
		rows, err := s.Usage(ctx, c.by, from, to, now)
		if err != nil {
			t.Fatalf("usage by %s: %v", c.by, err)
		}
		got := map[string]store.UsageRow{}
		for _, r := range rows {
			if _, dup := got[r.Key]; dup {
				t.Errorf("usage by %s: two rows for %s", c.by, r.Key)
			}
			got[r.Key] = r
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("usage by %s = %v, want %v", c.by, got, c.want)
		}
	}

	rows, err := s.Usage(ctx, "provider", at(2*time.Hour), at(3*time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Errorf("usage of an empty range: %v", rows)
	}
	if _, err := s.Usage(ctx, "agent", from, to, now); err == nil {
		t.Error("usage by agent: no error, want one (only provider and workspace)")
	}
}
