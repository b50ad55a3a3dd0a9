package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
)

// SQLite parses and plans a statement (sqlite3_prepare_v2) each time
// database/sql runs a query's text on a connection, and the store runs
// the same few dozen texts over and over: under a burst of starts that
// was an eighth of the supervisor's CPU. So each SQLite connection keeps
// the statements it has run prepared, by their text, and runs them again
// from there; the driver resets a statement and clears its bindings after
// each use. A statement whose rows are still open is not used again until
// they close: a second use of its text meanwhile is prepared on its own,
// as before. PostgreSQL's driver (pgx) keeps its own cache of prepared
// statements.

// maxCachedStmts bounds the statements one connection keeps prepared; the
// store's queries are fewer, and a text past the bound takes the place of
// one not in use.
const maxCachedStmts = 128

// cachingConnector opens the SQLite connections of a Store: the driver's
// own, wrapped by cachingConn.
type cachingConnector struct{ driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(sqliteConn)
	if !ok {
		conn.Close()
		return nil, errors.New("sqlstore: the SQLite driver's connection lacks an interface the statement cache needs")
	}
	return &cachingConn{sqliteConn: sc, stmts: map[string]*cachedStmt{}}, nil
}

// sqliteConn is what a modernc.org/sqlite connection offers database/sql;
// cachingConn passes on all but running queries.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
	driver.Pinger
}

// cachingConn is a SQLite connection that keeps its statements prepared.
// database/sql uses a connection from one goroutine at a time, closing
// rows included, so it needs no lock.
type cachingConn struct {
	sqliteConn
	stmts    map[string]*cachedStmt
	prepared int // statements prepared for the cache, for tests
}

// cachedStmt is a prepared statement and whether rows from it are open.
type cachedStmt struct {
	stmt interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	}
	busy bool
}

// stmt returns the prepared statement of query, preparing it on first
// use, or nil when it cannot be used now (its rows are open, or it does
// not prepare: the uncached path then reports the error).
func (c *cachingConn) stmt(ctx context.Context, query string) *cachedStmt {
	if s, ok := c.stmts[query]; ok {
		if s.busy {
			return nil
		}
		return s
	}
	ds, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	st, ok := ds.(interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	})
	if !ok {
		ds.Close()
		return nil
	}
	if len(c.stmts) >= maxCachedStmts && !c.evict() {
		st.Close()
		return nil
	}
	s := &cachedStmt{stmt: st}
	c.stmts[query] = s
	c.prepared++
	return s
}

// evict closes one statement that is not in use; false if all are.
func (c *cachingConn) evict() bool {
	for q, s := range c.stmts {
		if !s.busy {
			s.stmt.Close()
			delete(c.stmts, q)
			return true
		}
	}
	return false
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s := c.stmt(ctx, query)
	if s == nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	return s.stmt.ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s := c.stmt(ctx, query)
	if s == nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	rows, err := s.stmt.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &cachedRows{Rows: rows, s: s}, nil
}

// Close closes the cached statements, then the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for q, s := range c.stmts {
		errs = append(errs, s.stmt.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.sqliteConn.Close())...)
}

// cachedRows are rows of a cached statement, which is free again once
// they close.
type cachedRows struct {
	driver.Rows
	s *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.s.busy = false
	return err
}
