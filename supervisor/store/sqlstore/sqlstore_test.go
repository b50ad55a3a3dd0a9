package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
	"github.com/berthdev/berth/supervisor/store/storetest"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(pgtest.Wrap(m)) }

func testContext(tb testing.TB) context.Context {
	return testkit.Context(tb)
}

func openSQLite(tb testing.TB) *sqlstore.Store {
	tb.Helper()
	s, err := sqlstore.OpenSQLite(testContext(tb), filepath.Join(tb.TempDir(), "berth.db"))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func openPostgres(tb testing.TB) *sqlstore.Store {
	tb.Helper()
	s, err := sqlstore.OpenPostgres(testContext(tb), pgtest.Start(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openSQLite(t) })
}

func TestPostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openPostgres(t) })
}

func TestSQLiteReopen(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAgent(ctx, store.Agent{ID: "a1", Name: "one", Workspace: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.GetAgent(ctx, "a1"); err != nil {
		t.Errorf("agent after reopen: %v", err)
	}
}

// TestPostgresConcurrentMigrate starts several stores at once on one new
// database, as supervisors starting together do: each must open, and every
// migration must run once.
func TestPostgresConcurrentMigrate(t *testing.T) {
	ctx := testContext(t)
	url := pgtest.Start(t)
	const supervisors = 8
	stores := make([]*sqlstore.Store, supervisors)
	errs := make([]error, supervisors)
	var wg sync.WaitGroup
	for i := range supervisors {
		wg.Go(func() { stores[i], errs[i] = sqlstore.OpenPostgres(ctx, url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("supervisor %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		t.FailNow()
	}
	// Every supervisor sees the one schema.
	for i, s := range stores {
		if err := s.CreateAgent(ctx, store.Agent{ID: fmt.Sprintf("a%d", i), Name: "n", Workspace: "w"}); err != nil {
			t.Errorf("supervisor %d: create agent: %v", i, err)
		}
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var versions, distinct int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&versions, &distinct); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("migrations/*.sql")
	if versions != len(files) || distinct != len(files) {
		t.Errorf("schema_migrations has %d rows (%d distinct), want %d", versions, distinct, len(files))
	}
}

func TestOpenPostgresErrorHidesPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()
	_, err := sqlstore.OpenPostgres(ctx, "postgres://berth:hunter2secret@127.0.0.1:1/berth?sslmode=disable&connect_timeout=5")
	if err == nil {
		t.Fatal("opened a database on port 1")
	}
	if strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("error shows the password: %v", err)
	}
}

// Benchmarks: the same operations on SQLite and on PostgreSQL, side by
// side (go test -bench . ./supervisor/store/sqlstore/).

var benchT0 = time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)

func forEachStore(b *testing.B, fn func(b *testing.B, s store.Store)) {
	for _, c := range []struct {
		name string
		open func(testing.TB) *sqlstore.Store
	}{{"sqlite", openSQLite}, {"postgres", openPostgres}} {
		b.Run(c.name, func(b *testing.B) {
			s := c.open(b)
			defer s.Close()
			fn(b, s)
		})
	}
}

func benchAgents(b *testing.B, s store.Store, n int) []string {
	ctx := testContext(b)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("b%03d", i)
		if err := s.CreateAgent(ctx, store.Agent{ID: names[i], Name: names[i], Workspace: "bench", CreatedAt: benchT0}); err != nil {
			b.Fatal(err)
		}
		if err := s.CreateConnection(ctx, store.Connection{AgentID: names[i], Provider: "docker", Image: "headless",
			LeaseSeconds: 900, DailySeconds: 3600, CreatedAt: benchT0, Credentials: []byte("sealed")}); err != nil {
			b.Fatal(err)
		}
	}
	return names
}

// BenchmarkReserveStop measures one session's bookkeeping: the reservation
// and the stop that charges it. Agents take turns, one session each per
// day, so that every reservation sums a realistic day.
func BenchmarkReserveStop(b *testing.B) {
	forEachStore(b, func(b *testing.B, s store.Store) {
		ctx := testContext(b)
		names := benchAgents(b, s, 100)
		i := 0
		for b.Loop() {
			now := benchT0.AddDate(0, 0, i/len(names))
			x, err := s.Reserve(ctx, store.Reservation{
				Session:    store.Session{ID: fmt.Sprintf("s%d", i), AgentID: names[i%len(names)], ComputerID: "c", AttemptID: "a"},
				Now:        now,
				MinSeconds: 60,
			})
			if err != nil {
				b.Fatal(err)
			}
			x.State, x.ChargedSeconds, x.EndedAt = store.StateStopped, 30, now.Add(30*time.Second)
			if err := s.UpdateSession(ctx, x, store.StateStarting); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkLiveSession measures the lookup behind every tool call.
func BenchmarkLiveSession(b *testing.B) {
	forEachStore(b, func(b *testing.B, s store.Store) {
		ctx := testContext(b)
		names := benchAgents(b, s, 100)
		for _, name := range names {
			if _, err := s.Reserve(ctx, store.Reservation{
				Session: store.Session{ID: "s-" + name, AgentID: name}, Now: benchT0, MinSeconds: 60,
			}); err != nil {
				b.Fatal(err)
			}
		}
		i := 0
		for b.Loop() {
			if _, err := s.LiveSession(ctx, names[i%len(names)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// TestPostgresSeatsAcrossStores: viewers of one desktop arrive at once
// through several supervisors, each with its own store on one database:
// exactly the limit get a seat, counted across all of them.
func TestPostgresSeatsAcrossStores(t *testing.T) {
	ctx := testContext(t)
	url := pgtest.Start(t)
	const supervisors, viewers, limit = 4, 32, 2
	stores := make([]*sqlstore.Store, supervisors)
	for i := range stores {
		s, err := sqlstore.OpenPostgres(ctx, url)
		if err != nil {
			t.Fatalf("supervisor %d: %v", i, err)
		}
		defer s.Close()
		stores[i] = s
	}
	s := stores[0]
	if err := s.CreateAgent(ctx, store.Agent{ID: "a1", Name: "one", Workspace: "default", CreatedAt: benchT0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateConnection(ctx, store.Connection{AgentID: "a1", Provider: "docker", Image: "desktop",
		LeaseSeconds: 900, DailySeconds: 3600, CreatedAt: benchT0, Credentials: []byte("sealed")}); err != nil {
		t.Fatal(err)
	}
	x, err := s.Reserve(ctx, store.Reservation{Session: store.Session{ID: "s1", AgentID: "a1"}, Now: benchT0, MinSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	start := make(chan struct{})
	for i := range viewers {
		wg.Go(func() {
			<-start
			_, err := stores[i%supervisors].TakeSeat(ctx, x.ID, fmt.Sprintf("w%02d", i), benchT0.Add(2*time.Minute), benchT0, limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrSeatsFull):
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("take seat: %v", err)
	}
	if won != limit {
		t.Errorf("%d viewers got a seat through %d supervisors, want %d", won, supervisors, limit)
	}
	for i, st := range stores {
		if n, err := st.SeatsHeld(ctx, x.ID, benchT0); err != nil || n != limit {
			t.Errorf("supervisor %d counts %d seats, %v; want %d", i, n, err, limit)
		}
	}
}
