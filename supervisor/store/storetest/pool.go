package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func poolMember(id, owner string, created time.Time) store.PoolMember {
	return store.PoolMember{
		ComputerID: id, Provider: "docker", Image: "headless",
		AttemptID: "pa-" + id, Owner: owner, State: store.PoolCreating, CreatedAt: created,
	}
}

// addWaiting records a member and moves it to waiting with an endpoint.
func addWaiting(t *testing.T, s store.Store, m store.PoolMember) store.PoolMember {
	t.Helper()
	ctx := testContext(t)
	if err := s.AddPoolMember(ctx, m); err != nil {
		t.Fatalf("add pool member %s: %v", m.ComputerID, err)
	}
	m.State, m.MachineID, m.Endpoint = store.PoolWaiting, "berth-c-"+m.ComputerID, "http://10.0.0.1:7070/"+m.ComputerID
	if err := s.UpdatePoolMember(ctx, m, store.PoolCreating); err != nil {
		t.Fatalf("pool member %s creating -> waiting: %v", m.ComputerID, err)
	}
	return m
}

// testPool: members are recorded creating, then waiting; a reservation with
// PoolOwner claims the oldest waiting member of its owner, provider and
// image, and the session takes the member's ids; other owners', other
// images' and creating members are never claimed; deletes honour the state.
func testPool(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "p1", "default", "docker", 300, 3600)
	connect(t, s, "p2", "default", "docker", 300, 3600)
	connect(t, s, "p3", "default", "docker", 300, 3600)
	connect(t, s, "p4", "default", "docker", 300, 3600)

	older := addWaiting(t, s, poolMember("older", "i1", at(0)))
	newer := addWaiting(t, s, poolMember("newer", "i1", at(time.Second)))
	addWaiting(t, s, poolMember("theirs", "i2", at(-time.Hour)))
	desk := poolMember("desk", "i1", at(-time.Hour))
	desk.Image = "desktop"
	addWaiting(t, s, desk)
	if err := s.AddPoolMember(ctx, poolMember("making", "i1", at(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPoolMember(ctx, poolMember("older", "i1", at(0))); !errors.Is(err, store.ErrConflict) {
		t.Errorf("add a member twice: %v, want ErrConflict", err)
	}
	if err := s.UpdatePoolMember(ctx, store.PoolMember{ComputerID: older.ComputerID, State: store.PoolWaiting}, store.PoolCreating); !errors.Is(err, store.ErrStale) {
		t.Errorf("update from a state the member left: %v, want ErrStale", err)
	}
	if err := s.UpdatePoolMember(ctx, store.PoolMember{ComputerID: "nope", State: store.PoolWaiting}, store.PoolCreating); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of an unknown member: %v, want ErrNotFound", err)
	}

	claim := func(agent, id string) store.Session {
		t.Helper()
		r := reservation(agent, id, at(time.Minute))
		r.PoolOwner = "i1"
		x, err := s.Reserve(ctx, r)
		if err != nil {
			t.Fatalf("reserve %s with a pool claim: %v", id, err)
		}
		return x
	}
	x := claim("p1", "s1")
	want := x
	want.ComputerID, want.AttemptID, want.MachineID, want.Endpoint = older.ComputerID, older.AttemptID, older.MachineID, older.Endpoint
	if d := diffSession(x, want); d != "" || x.MachineID != older.MachineID {
		t.Fatalf("first claim: session %+v, want the oldest waiting member %s (%s)", x, older.MachineID, d)
	}
	checkStored(t, s, x)
	got, err := s.GetPoolMember(ctx, older.ComputerID)
	if err != nil || got.State != store.PoolClaimed || got.SessionID != "s1" || !got.ClaimedAt.Equal(at(time.Minute)) {
		t.Fatalf("claimed member: %+v %v, want claimed by s1 at %s", got, err, at(time.Minute))
	}
	if x := claim("p2", "s2"); x.MachineID != newer.MachineID || x.ComputerID != "newer" {
		t.Fatalf("second claim got %q, want %s", x.MachineID, newer.MachineID)
	}
	// None of i1's headless members waits now: the session keeps its own ids.
	x = claim("p3", "s3")
	if x.MachineID != "" || x.ComputerID != "c-s3" || x.AttemptID != "a-s3" {
		t.Fatalf("claim with nothing waiting: %+v, want the session's own ids and no machine", x)
	}
	// A reservation refused for a live session claims nothing.
	r := reservation("p1", "s1b", at(time.Minute))
	r.PoolOwner = "i1"
	if _, err := s.Reserve(ctx, r); !errors.Is(err, store.ErrLive) {
		t.Fatalf("second reservation of p1: %v, want ErrLive", err)
	}
	// Without PoolOwner nothing is claimed.
	addWaiting(t, s, poolMember("spare", "i1", at(0)))
	if x := reserve(t, s, "p4", "s4", at(time.Minute)); x.MachineID != "" {
		t.Fatalf("reservation without PoolOwner claimed %s", x.MachineID)
	}

	all, err := s.PoolMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, m := range all {
		states[m.ComputerID] = m.State
	}
	wantStates := map[string]string{"older": "claimed", "newer": "claimed", "theirs": "waiting", "desk": "waiting", "making": "creating", "spare": "waiting"}
	if fmt.Sprint(states) != fmt.Sprint(wantStates) {
		t.Errorf("members = %v, want %v", states, wantStates)
	}
	if all[0].ComputerID != "theirs" && all[0].ComputerID != "desk" && all[0].ComputerID != "making" {
		t.Errorf("members not oldest first: %v", all[0].ComputerID)
	}

	// Deletes: only in the named state, or in any.
	if err := s.DeletePoolMember(ctx, older.ComputerID, store.PoolWaiting); !errors.Is(err, store.ErrStale) {
		t.Errorf("delete a claimed member as waiting: %v, want ErrStale", err)
	}
	if err := s.DeletePoolMember(ctx, older.ComputerID, ""); err != nil {
		t.Errorf("delete a claimed member: %v", err)
	}
	if err := s.DeletePoolMember(ctx, older.ComputerID, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete a deleted member: %v, want ErrNotFound", err)
	}
	if _, err := s.GetPoolMember(ctx, older.ComputerID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get a deleted member: %v, want ErrNotFound", err)
	}
	if err := s.DeletePoolMember(ctx, "spare", store.PoolWaiting); err != nil {
		t.Errorf("delete a waiting member: %v", err)
	}
}

// testConcurrentPoolClaim: 40 agents start at once against 6 waiting
// members: exactly 6 sessions get one each, no member goes to two
// sessions, and the rest start without one.
func testConcurrentPoolClaim(t *testing.T, s store.Store) {
	ctx := testContext(t)
	const agents, members = 40, 6
	for i := range agents {
		connect(t, s, fmt.Sprintf("q%02d", i), "default", "docker", 300, 3600)
	}
	for i := range members {
		addWaiting(t, s, poolMember(fmt.Sprintf("m%d", i), "i1", at(time.Duration(i)*time.Second)))
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		byMach  = map[string]string{}
		without int
	)
	start := make(chan struct{})
	for i := range agents {
		wg.Go(func() {
			<-start
			r := reservation(fmt.Sprintf("q%02d", i), fmt.Sprintf("cs%02d", i), t0)
			r.PoolOwner = "i1"
			x, err := s.Reserve(ctx, r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("reserve %d: %v", i, err)
			case x.MachineID == "":
				without++
			default:
				if other, dup := byMach[x.MachineID]; dup {
					t.Errorf("member %s claimed by %s and %s", x.MachineID, other, x.ID)
				}
				byMach[x.MachineID] = x.ID
			}
		})
	}
	close(start)
	wg.Wait()
	if len(byMach) != members || without != agents-members {
		t.Fatalf("%d sessions got a member and %d none, want %d and %d", len(byMach), without, members, agents-members)
	}
	all, err := s.PoolMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.State != store.PoolClaimed || byMach[m.MachineID] != m.SessionID {
			t.Errorf("member %s: state %s session %q, want claimed by %q", m.MachineID, m.State, m.SessionID, byMach[m.MachineID])
		}
		x, err := s.GetSession(ctx, m.SessionID)
		if err != nil || x.MachineID != m.MachineID || x.ComputerID != m.ComputerID {
			t.Errorf("session %s of member %s: %+v %v", m.SessionID, m.MachineID, x, err)
		}
	}
}
