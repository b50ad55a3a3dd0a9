package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// testPersistentConnection: a connection's persistence settings and a
// session's home fields are stored as written, and a connection written
// without persistence reads back as "none".
func testPersistentConnection(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "plain", "ws", "docker", 300, 3600)
	c, err := s.GetConnection(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if c.Persistence != "none" || c.IdleSleepSeconds != 0 || c.MaxCheckpoints != 0 {
		t.Errorf("plain connection = %+v, want persistence none and no sleep settings", c)
	}
	if err := s.CreateAgent(ctx, store.Agent{ID: "keeper", Name: "keeper", Workspace: "ws", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	want := store.Connection{AgentID: "keeper", Provider: "docker", Image: "headless", LeaseSeconds: 300, DailySeconds: 3600,
		Persistence: "home", IdleSleepSeconds: 600, MaxCheckpoints: 10, CreatedAt: t0, Credentials: []byte("sealed")}
	if err := s.CreateConnection(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetConnection(ctx, "keeper")
	if err != nil {
		t.Fatal(err)
	}
	if got.Persistence != "home" || got.IdleSleepSeconds != 600 || got.MaxCheckpoints != 10 {
		t.Errorf("persistent connection = %+v, want %+v", got, want)
	}

	r := reservation("keeper", "s1", t0)
	r.Session.Home, r.Session.WakeFrom, r.Session.SleepAt = store.HomeWake, "before-upgrade", at(600*time.Second)
	x, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	checkStored(t, s, x)
	x.Home = store.HomeLive
	move(t, s, &x, store.StateRunning)
	checkStored(t, s, x)
}

func archive(agent, name, key string, n int64, created time.Time) store.Archive {
	return store.Archive{AgentID: agent, Workspace: "ws", Name: name, Key: key, Bytes: n,
		SHA256: fmt.Sprintf("%064x", n), Image: "headless", SessionID: "s-" + key, CreatedAt: created}
}

// testArchives: put, replace (the old one is answered for its object to be
// deleted), get, list, delete, the keys and the stored bytes.
func testArchives(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "ws", "docker", 300, 3600)
	connect(t, s, "a2", "ws2", "docker", 300, 3600)
	if _, err := s.GetArchive(ctx, "a1", store.SleepArchive); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get before any: %v, want ErrNotFound", err)
	}
	sleep1 := archive("a1", store.SleepArchive, "k1", 100, at(time.Second))
	if old, ok, err := s.PutArchive(ctx, sleep1, 10); err != nil || ok {
		t.Fatalf("first put = %+v, %v, %v; want nothing replaced", old, ok, err)
	}
	sleep2 := archive("a1", store.SleepArchive, "k2", 200, at(2*time.Second))
	old, ok, err := s.PutArchive(ctx, sleep2, 10)
	if err != nil || !ok || old != sleep1 {
		t.Fatalf("replace = %+v, %v, %v; want %+v replaced", old, ok, err, sleep1)
	}
	cp := archive("a1", "before-upgrade", "k3", 300, at(3*time.Second))
	if _, ok, err := s.PutArchive(ctx, cp, 10); err != nil || ok {
		t.Fatalf("checkpoint put: %v, %v", ok, err)
	}
	other := archive("a2", store.SleepArchive, "k4", 7, at(4*time.Second))
	other.Workspace = "ws2"
	if _, _, err := s.PutArchive(ctx, other, 10); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetArchive(ctx, "a1", store.SleepArchive); err != nil || got != sleep2 {
		t.Errorf("get sleep = %+v, %v; want %+v", got, err, sleep2)
	}
	list, err := s.ArchivesOf(ctx, "a1")
	if err != nil || len(list) != 2 || list[0] != sleep2 || list[1] != cp {
		t.Errorf("archives of a1 = %+v, %v; want [%+v %+v]", list, err, sleep2, cp)
	}
	keys, err := s.ArchiveKeys(ctx)
	if err != nil || fmt.Sprint(keys) != "[k2 k3 k4]" {
		t.Errorf("keys = %v, %v; want [k2 k3 k4]", keys, err)
	}
	stored, err := s.Stored(ctx)
	want := []store.StoredRow{{AgentID: "a1", Workspace: "ws", Bytes: 500, Archives: 2}, {AgentID: "a2", Workspace: "ws2", Bytes: 7, Archives: 1}}
	if err != nil || fmt.Sprint(stored) != fmt.Sprint(want) {
		t.Errorf("stored = %+v, %v; want %+v", stored, err, want)
	}
	if got, err := s.DeleteArchive(ctx, "a1", "before-upgrade"); err != nil || got != cp {
		t.Errorf("delete = %+v, %v; want %+v", got, err, cp)
	}
	if _, err := s.DeleteArchive(ctx, "a1", "before-upgrade"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete again: %v, want ErrNotFound", err)
	}
	if _, _, err := s.PutArchive(ctx, archive("nobody", store.SleepArchive, "k5", 1, t0), 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("put for a missing agent: %v, want ErrNotFound", err)
	}
}

// testCheckpointLimit: a new checkpoint past the limit is refused; the
// sleep archive and a checkpoint replaced under its own name do not count.
func testCheckpointLimit(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "ws", "docker", 300, 3600)
	for i := range 3 {
		if _, _, err := s.PutArchive(ctx, archive("a1", fmt.Sprintf("cp%d", i), fmt.Sprintf("k%d", i), 1, at(time.Duration(i)*time.Second)), 3); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
	}
	_, _, err := s.PutArchive(ctx, archive("a1", "cp3", "k3", 1, t0), 3)
	var le *store.CheckpointLimitError
	if !errors.As(err, &le) || le.Limit != 3 || !errors.Is(err, store.ErrCheckpointLimit) {
		t.Fatalf("fourth checkpoint: %v, want a limit of 3", err)
	}
	if _, ok, err := s.PutArchive(ctx, archive("a1", "cp1", "k1b", 2, t0), 3); err != nil || !ok {
		t.Errorf("replace cp1 at the limit: %v, %v", ok, err)
	}
	if _, _, err := s.PutArchive(ctx, archive("a1", store.SleepArchive, "ks", 2, t0), 3); err != nil {
		t.Errorf("sleep archive at the limit: %v", err)
	}
	if list, _ := s.ArchivesOf(ctx, "a1"); len(list) != 4 {
		t.Errorf("archives = %d, want 3 checkpoints and the sleep archive", len(list))
	}
}

// testConcurrentCheckpoints: writers racing for the last places of one
// agent never go past the limit.
func testConcurrentCheckpoints(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "ws", "docker", 300, 3600)
	const limit, writers = 4, 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			_, _, err := s.PutArchive(ctx, archive("a1", fmt.Sprintf("cp%02d", i), fmt.Sprintf("k%02d", i), 1, t0), limit)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	ok, refused := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, store.ErrCheckpointLimit):
			refused++
		default:
			t.Errorf("put: %v", err)
		}
	}
	list, err := s.ArchivesOf(ctx, "a1")
	if err != nil || len(list) != limit || ok != limit || refused != writers-limit {
		t.Errorf("%d stored (%v), %d written, %d refused; want %d, %d, %d", len(list), err, ok, refused, limit, limit, writers-limit)
	}
}

// testIdleSleepDue: a running session is due once its sleep time has come;
// TouchSession moves that time, and only for running persistent sessions.
func testIdleSleepDue(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "idle", "ws", "docker", 3600, 7200)
	connect(t, s, "plain", "ws", "docker", 3600, 7200)
	r := reservation("idle", "idle", t0)
	r.Session.Home, r.Session.SleepAt = store.HomeLive, at(600*time.Second)
	x, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	move(t, s, &x, store.StateRunning)
	p := reserve(t, s, "plain", "plain", t0)
	move(t, s, &p, store.StateRunning)

	due := func(now time.Time) []string {
		t.Helper()
		xs, err := s.SessionsDue(ctx, now, 100)
		if err != nil {
			t.Fatal(err)
		}
		return ids(xs)
	}
	if got := due(at(599 * time.Second)); len(got) != 0 {
		t.Errorf("due before the sleep time: %v", got)
	}
	if got := due(at(600 * time.Second)); fmt.Sprint(got) != "[idle]" {
		t.Errorf("due at the sleep time: %v, want [idle]", got)
	}
	if err := s.TouchSession(ctx, "idle", at(900*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := due(at(600 * time.Second)); len(got) != 0 {
		t.Errorf("due after a touch: %v", got)
	}
	x.SleepAt = at(900 * time.Second)
	checkStored(t, s, x)
	// A session without idle sleep keeps none.
	if err := s.TouchSession(ctx, "plain", at(900*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkStored(t, s, p)
	// A session that ended is not touched.
	end(t, s, &x, 10, at(10*time.Second))
	if err := s.TouchSession(ctx, "idle", at(2000*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkStored(t, s, x)
}

// testSuspendedSessions: the sessions listed as keeping a suspended
// machine are exactly those whose home is suspended, with their machine.
func testSuspendedSessions(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "sleeper", "ws", "docker", 300, 3600)
	suspended := func(want ...string) {
		t.Helper()
		xs, err := s.SuspendedSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(xs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("suspended sessions = %v, want %v", got, want)
		}
		for _, x := range xs {
			if x.MachineID == "" || x.Home != store.HomeSuspended {
				t.Errorf("suspended session %s: machine %q, home %q", x.ID, x.MachineID, x.Home)
			}
		}
	}
	x := reserve(t, s, "sleeper", "s1", t0)
	x.MachineID, x.Home = "m1", store.HomeLive
	move(t, s, &x, store.StateRunning)
	suspended()
	end(t, s, &x, 60, at(time.Minute))
	x.Home = store.HomeSuspended
	move(t, s, &x, store.StateStopped)
	suspended("s1")
	y := reserve(t, s, "sleeper", "s2", at(2*time.Minute))
	y.MachineID, y.Home = "m1", store.HomeLive
	move(t, s, &y, store.StateRunning)
	x.Home = store.HomeArchived
	move(t, s, &x, store.StateStopped)
	suspended()
}
