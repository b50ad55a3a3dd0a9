package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
)

// TestStatementCache: a SQLite connection prepares a query's text once
// however often it runs, answers right after each run with new arguments,
// serves the same text again while its first rows are still open, keeps
// at most maxCachedStmts statements, and still reports a bad statement.
func TestStatementCache(t *testing.T) {
	ctx, s := openSQLiteWith(t, "a1", "a2", "a3")
	// The one writing connection, to look inside its cache.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cache := func() (c *cachingConn) {
		t.Helper()
		if err := conn.Raw(func(dc any) error {
			var ok bool
			c, ok = dc.(*cachingConn)
			if !ok {
				return fmt.Errorf("the store's connection is a %T, not a cachingConn", dc)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := cache().prepared

	const byID = `SELECT name FROM agents WHERE id = ?`
	for i := range 30 {
		id := []string{"a1", "a2", "a3"}[i%3]
		var name string
		if err := conn.QueryRowContext(ctx, byID, id).Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "name-"+id {
			t.Fatalf("run %d: %s has name %q", i, id, name)
		}
	}
	if got := cache().prepared - before; got != 1 {
		t.Fatalf("30 runs of one text prepared %d statements, want 1", got)
	}

	// The same text again while its rows are open, in a transaction on
	// the same connection: run on its own, and both answer in full.
	const all = `SELECT id FROM agents ORDER BY id`
	conn.Close() // the pool has one writing connection; the transaction needs it
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	txRows, err := tx.QueryContext(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	var first, nested []string
	for txRows.Next() {
		var id string
		if err := txRows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		first = append(first, id)
		if len(first) == 2 {
			nested = queryIDs(ctx, t, tx, all)
		}
	}
	if err := txRows.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(first, ",") != "a1,a2,a3" || strings.Join(nested, ",") != "a1,a2,a3" {
		t.Fatalf("in a transaction, rows %v and, inside them, %v; want a1,a2,a3 for both", first, nested)
	}

	// Bounded: more texts than the bound leave at most the bound.
	conn, err = s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxCachedStmts + 20 {
		var n int
		if err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT COUNT(*) + %d FROM agents`, i)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 3+i {
			t.Fatalf("text %d answered %d, want %d", i, n, 3+i)
		}
	}
	if got := len(cache().stmts); got > maxCachedStmts {
		t.Fatalf("%d statements kept, more than %d", got, maxCachedStmts)
	}

	// A statement that does not prepare is an error, as without the cache.
	if _, err := conn.ExecContext(ctx, `UPDATE no_such_table SET x = 1`); err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("a statement on a missing table: %v", err)
	}
}

func queryIDs(ctx context.Context, t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string) []string {
	t.Helper()
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}
