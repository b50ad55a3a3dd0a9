package sqlstore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// TestSQLiteReadsBesideAWrite: on SQLite a lookup answers while a write
// transaction holds the one writing connection, sees what the last
// committed write left, and the reading pool refuses to write.
func TestSQLiteReadsBesideAWrite(t *testing.T) {
	ctx, s := openSQLiteWith(t, "a1")
	tx, err := s.db.BeginTx(ctx, nil) // takes the write lock at once (_txlock=immediate)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE agents SET name = 'renamed' WHERE id = 'a1'`); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		a, err := s.GetAgent(ctx, "a1")
		if err == nil && a.Name != "name-a1" {
			err = errors.New("read the uncommitted name " + a.Name)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("a read beside an open write transaction: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waited for the write transaction to end")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if a, err := s.GetAgent(ctx, "a1"); err != nil || a.Name != "renamed" {
		t.Fatalf("a read after the commit: %+v %v", a, err)
	}
	_, err = s.rd.ExecContext(ctx, `UPDATE agents SET name = 'by the reader' WHERE id = 'a1'`)
	if err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("a write through the reading pool: %v, want it refused", err)
	}
}

// openSQLiteWith opens a SQLite store in a folder of t's, closed when t
// ends, with an agent for each id (named "name-" and the id), and returns
// it with a context that ends with t or in 30 s.
func openSQLiteWith(t *testing.T, ids ...string) (context.Context, *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, id := range ids {
		if err := s.CreateAgent(ctx, store.Agent{ID: id, Name: "name-" + id, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, s
}
