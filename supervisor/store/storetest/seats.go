package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// seatSession makes a session whose desktop viewers take seats at.
func seatSession(t *testing.T, s store.Store, agent string) string {
	t.Helper()
	connect(t, s, agent, "default", "docker", 900, 3600)
	return reserve(t, s, agent, "s-"+agent, t0).ID
}

func takeSeat(t *testing.T, s store.Store, session, viewer string, expires, now time.Time, limit, want int) {
	t.Helper()
	held, err := s.TakeSeat(testContext(t), session, viewer, expires, now, limit)
	if err != nil || held != want {
		t.Fatalf("take seat %s/%s at %s: held %d, %v; want %d seats held", session, viewer, now.Format(time.TimeOnly), held, err, want)
	}
}

func checkHeld(t *testing.T, s store.Store, session string, now time.Time, want int) {
	t.Helper()
	n, err := s.SeatsHeld(testContext(t), session, now)
	if err != nil || n != want {
		t.Errorf("seats held at %s on %s: %d, %v; want %d", session, now.Format(time.TimeOnly), n, err, want)
	}
}

func checkSeated(t *testing.T, s store.Store, session, viewer string, now time.Time, want bool) {
	t.Helper()
	ok, err := s.Seated(testContext(t), session, viewer, now)
	if err != nil || ok != want {
		t.Errorf("viewer %s seated at %s on %s: %v, %v; want %v", viewer, session, now.Format(time.TimeOnly), ok, err, want)
	}
}

// testSeatLimit: a session's desktop seats limit viewers at once, each
// session on its own; a viewer seated already takes no second seat; the
// refusal says how many seats are held and the limit.
func testSeatLimit(t *testing.T, s store.Store) {
	ctx := testContext(t)
	s1, s2 := seatSession(t, s, "v1"), seatSession(t, s, "v2")
	exp := at(2 * time.Minute)
	takeSeat(t, s, s1, "w1", exp, t0, 2, 1)
	takeSeat(t, s, s1, "w2", exp, t0, 2, 2)
	checkHeld(t, s, s1, t0, 2)

	held, err := s.TakeSeat(ctx, s1, "w3", exp, t0, 2)
	var full *store.SeatsFullError
	if !errors.As(err, &full) || full.Held != 2 || full.Limit != 2 || held != 0 {
		t.Fatalf("a third viewer of two seats: held %d, %v; want a SeatsFullError of 2 held, limit 2", held, err)
	}
	if !errors.Is(err, store.ErrSeatsFull) {
		t.Errorf("%v is not ErrSeatsFull", err)
	}
	checkSeated(t, s, s1, "w3", t0, false)
	checkHeld(t, s, s1, t0, 2)

	// A seated viewer taking its seat again keeps it, with the new expiry.
	takeSeat(t, s, s1, "w2", at(5*time.Minute), at(time.Minute), 2, 2)
	checkSeated(t, s, s1, "w2", at(4*time.Minute), true)
	checkSeated(t, s, s1, "w1", at(4*time.Minute), false)

	// Another session's desktop has seats of its own.
	takeSeat(t, s, s2, "w3", exp, t0, 2, 1)
	checkHeld(t, s, s2, t0, 1)

	_, err = s.TakeSeat(ctx, "s-nobody", "w1", exp, t0, 2)
	wantErr(t, err, store.ErrNotFound, "a seat at a session that does not exist")
	if _, err := s.TakeSeat(ctx, s2, "w4", exp, t0, 0); err == nil {
		t.Error("took a seat with a limit of 0")
	}
	if _, err := s.TakeSeat(ctx, s2, "w4", t0, t0, 2); err == nil {
		t.Error("took a seat that expires at once")
	}
	checkHeld(t, s, s2, t0, 1)
}

// testSeatExpiry: a seat is held until its expiry, not at it; a lapsed
// seat frees its place for the next viewer and cannot be renewed.
func testSeatExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	s1 := seatSession(t, s, "v1")
	exp := at(2 * time.Minute)
	takeSeat(t, s, s1, "w1", exp, t0, 1, 1)
	checkSeated(t, s, s1, "w1", exp.Add(-time.Millisecond), true)
	checkHeld(t, s, s1, exp.Add(-time.Millisecond), 1)
	if _, err := s.TakeSeat(ctx, s1, "w2", exp.Add(time.Minute), exp.Add(-time.Millisecond), 1); !errors.Is(err, store.ErrSeatsFull) {
		t.Fatalf("a second viewer just before the first seat lapses: %v, want ErrSeatsFull", err)
	}
	checkSeated(t, s, s1, "w1", exp, false)
	checkHeld(t, s, s1, exp, 0)
	takeSeat(t, s, s1, "w2", exp.Add(time.Minute), exp, 1, 1)

	err := s.RenewSeat(ctx, s1, "w1", exp.Add(2*time.Minute), exp)
	wantErr(t, err, store.ErrNotFound, "renewing a lapsed seat")
	checkSeated(t, s, s1, "w1", exp, false)
	checkHeld(t, s, s1, exp, 1)
}

// testSeatRenewLeave: a renewed seat outlives its first expiry; a viewer
// that leaves frees its seat at once and cannot renew it.
func testSeatRenewLeave(t *testing.T, s store.Store) {
	ctx := testContext(t)
	s1 := seatSession(t, s, "v1")
	takeSeat(t, s, s1, "w1", at(2*time.Minute), t0, 2, 1)
	takeSeat(t, s, s1, "w2", at(2*time.Minute), t0, 2, 2)
	if err := s.RenewSeat(ctx, s1, "w1", at(4*time.Minute), at(time.Minute)); err != nil {
		t.Fatalf("renew: %v", err)
	}
	checkSeated(t, s, s1, "w1", at(3*time.Minute), true)
	checkSeated(t, s, s1, "w2", at(3*time.Minute), false)
	checkHeld(t, s, s1, at(3*time.Minute), 1)
	err := s.RenewSeat(ctx, s1, "w9", at(4*time.Minute), at(time.Minute))
	wantErr(t, err, store.ErrNotFound, "renewing a seat never taken")

	if err := s.LeaveSeat(ctx, s1, "w1"); err != nil {
		t.Fatalf("leave: %v", err)
	}
	checkSeated(t, s, s1, "w1", at(time.Minute), false)
	checkHeld(t, s, s1, at(time.Minute), 1)
	err = s.RenewSeat(ctx, s1, "w1", at(5*time.Minute), at(time.Minute))
	wantErr(t, err, store.ErrNotFound, "renewing a seat after leaving")
	if err := s.LeaveSeat(ctx, s1, "w1"); err != nil {
		t.Errorf("leaving twice: %v", err)
	}
	// The freed seat goes to the next viewer.
	takeSeat(t, s, s1, "w3", at(3*time.Minute), at(time.Minute), 2, 2)
}

// testPurgeSeats: a purge deletes the seats of every session that expired
// by then, and keeps the rest.
func testPurgeSeats(t *testing.T, s store.Store) {
	ctx := testContext(t)
	s1, s2 := seatSession(t, s, "v1"), seatSession(t, s, "v2")
	takeSeat(t, s, s1, "w1", at(time.Minute), t0, 4, 1)
	takeSeat(t, s, s1, "w2", at(3*time.Minute), t0, 4, 2)
	takeSeat(t, s, s2, "w3", at(2*time.Minute), t0, 4, 1)
	n, err := s.PurgeSeats(ctx, at(2*time.Minute)) // w1, and w3 which expires exactly then
	if err != nil || n != 2 {
		t.Fatalf("purge: %d, %v; want 2 seats purged", n, err)
	}
	checkHeld(t, s, s1, t0, 1)
	checkHeld(t, s, s2, t0, 0)
	checkSeated(t, s, s1, "w2", t0, true)
	if n, err := s.PurgeSeats(ctx, at(2*time.Minute)); err != nil || n != 0 {
		t.Errorf("second purge: %d, %v; want 0", n, err)
	}
}

// testConcurrentSeats: on each of several desktops, more viewers than
// seats arrive at once: exactly the limit get a seat, the others are
// refused, and the counts agree with the seats held.
func testConcurrentSeats(t *testing.T, s store.Store) {
	ctx := testContext(t)
	const desktops, viewers, limit = 8, 12, 3
	sessions := make([]string, desktops)
	for i := range sessions {
		sessions[i] = seatSession(t, s, fmt.Sprintf("v%d", i))
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    = map[string]int{}
		counts = map[string][]int{}
	)
	start := make(chan struct{})
	for i := range desktops * viewers {
		session := sessions[i%desktops]
		wg.Go(func() {
			<-start
			held, err := s.TakeSeat(ctx, session, fmt.Sprintf("w%03d", i), at(2*time.Minute), t0, limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won[session]++
				counts[session] = append(counts[session], held)
			case !errors.Is(err, store.ErrSeatsFull):
				t.Errorf("take seat %d at %s: %v", i, session, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, session := range sessions {
		if won[session] != limit {
			t.Errorf("%s: %d viewers got a seat, want %d", session, won[session], limit)
		}
		seen := map[int]bool{}
		for _, n := range counts[session] {
			seen[n] = true
		}
		for n := 1; n <= limit; n++ {
			if !seen[n] {
				t.Errorf("%s: no viewer saw %d seats held (counts %v)", session, n, counts[session])
			}
		}
		checkHeld(t, s, session, t0, limit)
	}
}
