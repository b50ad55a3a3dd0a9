// Package sqlstore implements store.Store on SQL databases: the embedded
// SQLite (modernc.org/sqlite, WAL) that `berth dev` uses, and PostgreSQL.
// Both share one schema and one set of queries; the dialect only changes
// placeholders and how a reservation locks its connection row.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/supervisor/store"

	moderncsqlite "modernc.org/sqlite"
)

//go:embed migrations/*.sql
var migrations embed.FS

type dialect int

const (
	sqlite dialect = iota
	postgres
)

// Store is a store.Store on a SQL database.
type Store struct {
	// db takes every write and every transaction.
	db *sql.DB
	// rd takes reads outside transactions. On SQLite it is a pool of its
	// own that may only read: a write-ahead log lets readers run beside
	// the one writer, so a lookup never queues behind a transaction. On
	// PostgreSQL it is db.
	rd      *sql.DB
	dialect dialect
}

// sqliteReaders bounds the connections that read a SQLite store at once.
const sqliteReaders = 4

// OpenSQLite opens (creating if needed) the SQLite database at path and
// applies the migrations.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	db, err := openSQLite(dsn + "&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One writing connection: SQLite has one writer, and a single
	// connection makes every transaction serial without busy retries.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, rd: db, dialect: sqlite}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	rd, err := openSQLite(dsn + "&_pragma=query_only(1)")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s for reading: %w", path, err)
	}
	rd.SetMaxOpenConns(sqliteReaders)
	rd.SetMaxIdleConns(sqliteReaders)
	s.rd = rd
	return s, nil
}

// openSQLite opens a pool of SQLite connections to dsn that keep their
// statements prepared.
func openSQLite(dsn string) (*sql.DB, error) {
	c, err := moderncsqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(cachingConnector{c}), nil
}

// Close closes the database.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.rd != s.db {
		err = errors.Join(err, s.rd.Close())
	}
	return err
}

// q rewrites ? placeholders for the dialect.
func (s *Store) q(query string) string {
	if s.dialect != postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = s.tx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			for _, stmt := range strings.Split(string(body), ";") {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", version, err)
				}
			}
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version) VALUES (?)`), version)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func isUnique(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "UNIQUE constraint") || strings.Contains(msg, "PRIMARY KEY") ||
		strings.Contains(msg, "duplicate key") || strings.Contains(msg, "SQLSTATE 23505")
}

// CreateAgent implements store.Store.
func (s *Store) CreateAgent(ctx context.Context, a store.Agent) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO agents (id, name, workspace, created_at) VALUES (?, ?, ?, ?)`),
		a.ID, a.Name, a.Workspace, ms(a.CreatedAt))
	if isUnique(err) {
		return fmt.Errorf("agent %s: %w", a.ID, store.ErrConflict)
	}
	return err
}

// GetAgent implements store.Store.
func (s *Store) GetAgent(ctx context.Context, id string) (store.Agent, error) {
	return s.getAgent(ctx, s.rd, id)
}

const agentCols = `id, name, workspace, created_at`

func scanAgent(row rowScanner) (store.Agent, error) {
	var a store.Agent
	var created int64
	err := row.Scan(&a.ID, &a.Name, &a.Workspace, &created)
	a.CreatedAt = fromMS(created)
	return a, err
}

// getAgent reads an agent with q: the database, or a transaction.
func (s *Store) getAgent(ctx context.Context, q sqlQuerier, id string) (store.Agent, error) {
	a, err := scanAgent(q.QueryRowContext(ctx, s.q(`SELECT `+agentCols+` FROM agents WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("agent %s: %w", id, store.ErrNotFound)
	}
	return a, err
}

// AgentsIn implements store.Store.
func (s *Store) AgentsIn(ctx context.Context, workspace string) ([]store.Agent, error) {
	return queryAll(ctx, s.rd, s.q(`SELECT `+agentCols+` FROM agents WHERE workspace = ? ORDER BY id`), []any{workspace}, scanAgent)
}

// Agents implements store.Store.
func (s *Store) Agents(ctx context.Context) ([]store.Agent, error) {
	return queryAll(ctx, s.rd, `SELECT `+agentCols+` FROM agents ORDER BY id`, nil, scanAgent)
}

// DeleteAgent implements store.Store.
func (s *Store) DeleteAgent(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM agents WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("delete agent %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("agent %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// CreateConnection implements store.Store.
func (s *Store) CreateConnection(ctx context.Context, c store.Connection) error {
	if c.Persistence == "" {
		c.Persistence = "none"
	}
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO connections (`+connCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		c.AgentID, c.Provider, c.Image, c.LeaseSeconds, c.DailySeconds, string(c.Credentials), ms(c.CreatedAt),
		c.Persistence, c.IdleSleepSeconds, c.MaxCheckpoints, boolInt(c.BrowserRecording), c.BrowserProxyCountry, max(c.DesktopUsers, 1), boolInt(c.BrowserEvaluate))
	if isUnique(err) {
		return fmt.Errorf("connection for agent %s: %w", c.AgentID, store.ErrConflict)
	}
	return err
}

const connCols = `agent_id, provider, image, lease_seconds, daily_seconds, credentials, created_at,
	persistence, idle_sleep_seconds, max_checkpoints, browser_recording, browser_proxy_country, desktop_users, browser_evaluate`

// boolInt is b as the 0 or 1 of an INTEGER column, the same on both
// dialects.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func scanConn(row rowScanner) (store.Connection, error) {
	var c store.Connection
	var creds string
	var created int64
	var record, evaluate int
	err := row.Scan(&c.AgentID, &c.Provider, &c.Image, &c.LeaseSeconds, &c.DailySeconds, &creds, &created,
		&c.Persistence, &c.IdleSleepSeconds, &c.MaxCheckpoints, &record, &c.BrowserProxyCountry, &c.DesktopUsers, &evaluate)
	c.BrowserRecording, c.BrowserEvaluate = record != 0, evaluate != 0
	c.Credentials = []byte(creds)
	c.CreatedAt = fromMS(created)
	return c, err
}

// GetConnection implements store.Store.
func (s *Store) GetConnection(ctx context.Context, agentID string) (store.Connection, error) {
	c, err := scanConn(s.rd.QueryRowContext(ctx, s.q(`SELECT `+connCols+` FROM connections WHERE agent_id = ?`), agentID))
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("connection for agent %s: %w", agentID, store.ErrNotFound)
	}
	return c, err
}

// SetConnectionLimits implements store.Store.
func (s *Store) SetConnectionLimits(ctx context.Context, agentID string, leaseSeconds, dailySeconds int) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE connections SET lease_seconds = ?, daily_seconds = ? WHERE agent_id = ?`), leaseSeconds, dailySeconds, agentID)
	if err != nil {
		return fmt.Errorf("set the limits of %s: %w", agentID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("connection for agent %s: %w", agentID, store.ErrNotFound)
	}
	return nil
}

// Connections implements store.Store.
func (s *Store) Connections(ctx context.Context) ([]store.Connection, error) {
	return queryAll(ctx, s.rd, `SELECT `+connCols+` FROM connections ORDER BY agent_id`, nil, scanConn)
}

// DeleteConnection implements store.Store.
func (s *Store) DeleteConnection(ctx context.Context, agentID string) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM connections WHERE agent_id = ?`), agentID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("connection for agent %s: %w", agentID, store.ErrNotFound)
	}
	return nil
}

const sessCols = `id, agent_id, workspace, provider, image, computer_id, attempt_id, state, machine_id, endpoint, header,
	day, reserved_seconds, charged_seconds, created_at, expires_at, ended_at, cleanup_tries, next_cleanup_at, last_error, owner, claim_until,
	home, wake_from, sleep_at`

func scanSession(row rowScanner) (store.Session, error) {
	var x store.Session
	var created, expires, ended, next, claim, sleep int64
	err := row.Scan(&x.ID, &x.AgentID, &x.Workspace, &x.Provider, &x.Image, &x.ComputerID, &x.AttemptID, &x.State,
		&x.MachineID, &x.Endpoint, &x.Header, &x.Day, &x.ReservedSeconds, &x.ChargedSeconds,
		&created, &expires, &ended, &x.CleanupTries, &next, &x.LastError, &x.Owner, &claim,
		&x.Home, &x.WakeFrom, &sleep)
	x.CreatedAt, x.ExpiresAt, x.EndedAt, x.NextCleanupAt = fromMS(created), fromMS(expires), fromMS(ended), fromMS(next)
	x.ClaimUntil, x.SleepAt = fromMS(claim), fromMS(sleep)
	return x, err
}

func (s *Store) querySessions(ctx context.Context, q sqlQuerier, query string, args ...any) ([]store.Session, error) {
	return queryAll(ctx, q, s.q(query), args, scanSession)
}

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(...any) error }

// queryAll runs query on q and scans every row of its answer with scan.
func queryAll[T any](ctx context.Context, q sqlQuerier, query string, args []any, scan func(rowScanner) (T, error)) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

type sqlQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const liveStates = `('starting', 'running', 'uncertain')`

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, r store.Reservation) (store.Session, error) {
	var out store.Session
	err := s.tx(ctx, func(tx *sql.Tx) error {
		lock := ""
		if s.dialect == postgres {
			lock = " FOR UPDATE"
		}
		c, err := scanConn(tx.QueryRowContext(ctx, s.q(`SELECT `+connCols+` FROM connections WHERE agent_id = ?`+lock), r.Session.AgentID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("connection for agent %s: %w", r.Session.AgentID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		live, err := s.querySessions(ctx, tx, `SELECT `+sessCols+` FROM sessions WHERE agent_id = ? AND state IN `+liveStates, c.AgentID)
		if err != nil {
			return err
		}
		if len(live) > 0 {
			out = live[0]
			return store.ErrLive
		}
		a, err := s.getAgent(ctx, tx, c.AgentID)
		if err != nil {
			return err
		}
		day := store.Day(r.Now)
		used, reserved, err := s.dayTotals(ctx, tx, c.AgentID, day)
		if err != nil {
			return err
		}
		left := c.DailySeconds - used - reserved
		grant := min(c.LeaseSeconds, left)
		if grant < r.MinSeconds {
			return &store.BudgetError{LeftSeconds: max(left, 0), MinSeconds: r.MinSeconds, ResetsAt: store.NextMidnight(r.Now)}
		}
		x := r.Session
		x.AgentID = c.AgentID
		x.Workspace = a.Workspace
		x.Provider = c.Provider
		if x.Image == "" {
			x.Image = c.Image
		}
		x.State = store.StateStarting
		x.Day = day
		x.ReservedSeconds = grant
		x.CreatedAt = r.Now.UTC()
		x.ExpiresAt = r.Now.Add(time.Duration(grant) * time.Second).UTC()
		if r.PoolOwner != "" {
			m, ok, err := s.claimPoolMember(ctx, tx, x.Provider, x.Image, r.PoolOwner, x.ID, r.Now)
			if err != nil {
				return err
			}
			if ok {
				x.ComputerID, x.AttemptID, x.MachineID, x.Endpoint = m.ComputerID, m.AttemptID, m.MachineID, m.Endpoint
			}
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO sessions (`+sessCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), sessArgs(x)...)
		if err != nil {
			return err
		}
		out = x
		return nil
	})
	return out, err
}

func sessArgs(x store.Session) []any {
	return []any{x.ID, x.AgentID, x.Workspace, x.Provider, x.Image, x.ComputerID, x.AttemptID, x.State,
		x.MachineID, x.Endpoint, x.Header, x.Day, x.ReservedSeconds, x.ChargedSeconds,
		ms(x.CreatedAt), ms(x.ExpiresAt), ms(x.EndedAt), x.CleanupTries, ms(x.NextCleanupAt), x.LastError,
		x.Owner, ms(x.ClaimUntil), x.Home, x.WakeFrom, ms(x.SleepAt)}
}

// dayTotals returns the seconds charged by ended sessions and reserved by
// live ones on the agent's budget day. A session that is stopping or whose
// cleanup failed has its charge fixed already.
func (s *Store) dayTotals(ctx context.Context, q sqlQuerier, agentID, day string) (used, reserved int, err error) {
	err = q.QueryRowContext(ctx, s.q(`SELECT
		COALESCE(SUM(CASE WHEN state IN `+liveStates+` THEN 0 ELSE charged_seconds END), 0),
		COALESCE(SUM(CASE WHEN state IN `+liveStates+` THEN reserved_seconds ELSE 0 END), 0)
		FROM sessions WHERE agent_id = ? AND day = ?`), agentID, day).Scan(&used, &reserved)
	return used, reserved, err
}

// LiveSession implements store.Store.
func (s *Store) LiveSession(ctx context.Context, agentID string) (store.Session, error) {
	x, err := scanSession(s.rd.QueryRowContext(ctx, s.q(`SELECT `+sessCols+` FROM sessions WHERE agent_id = ? AND state IN `+liveStates+` LIMIT 1`), agentID))
	if errors.Is(err, sql.ErrNoRows) {
		return x, fmt.Errorf("live session of agent %s: %w", agentID, store.ErrNotFound)
	}
	return x, err
}

// LiveComputer implements store.Store.
func (s *Store) LiveComputer(ctx context.Context, computerID string) (store.Session, error) {
	x, err := scanSession(s.rd.QueryRowContext(ctx, s.q(`SELECT `+sessCols+` FROM sessions WHERE computer_id = ? AND state IN `+liveStates+` LIMIT 1`), computerID))
	if errors.Is(err, sql.ErrNoRows) {
		return x, fmt.Errorf("live session of computer %s: %w", computerID, store.ErrNotFound)
	}
	return x, err
}

// GetSession implements store.Store.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	x, err := scanSession(s.rd.QueryRowContext(ctx, s.q(`SELECT `+sessCols+` FROM sessions WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return x, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	return x, err
}

// UpdateSession implements store.Store.
func (s *Store) UpdateSession(ctx context.Context, x store.Session, from string) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE sessions SET state = ?, machine_id = ?, endpoint = ?, header = ?,
		reserved_seconds = ?, charged_seconds = ?, expires_at = ?, ended_at = ?, cleanup_tries = ?, next_cleanup_at = ?, last_error = ?,
		home = ?, wake_from = ?, sleep_at = ?
		WHERE id = ? AND state = ?`),
		x.State, x.MachineID, x.Endpoint, x.Header, x.ReservedSeconds, x.ChargedSeconds, ms(x.ExpiresAt), ms(x.EndedAt),
		x.CleanupTries, ms(x.NextCleanupAt), x.LastError, x.Home, x.WakeFrom, ms(x.SleepAt), x.ID, from)
	if err != nil {
		return fmt.Errorf("update session %s: %w", x.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("session %s not in state %s: %w", x.ID, from, store.ErrStale)
	}
	return nil
}

// SessionsDue implements store.Store.
func (s *Store) SessionsDue(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	return s.querySessions(ctx, s.rd, `SELECT `+sessCols+` FROM sessions
		WHERE (state = 'running' AND expires_at <= ?)
		   OR (state = 'running' AND sleep_at > 0 AND sleep_at <= ?)
		   OR (state IN ('stopping', 'cleanup_failed') AND next_cleanup_at <= ?)
		ORDER BY expires_at LIMIT ?`, ms(now), ms(now), ms(now), limit)
}

// SessionsByState implements store.Store.
func (s *Store) SessionsByState(ctx context.Context, states ...string) ([]store.Session, error) {
	if len(states) == 0 {
		return nil, nil
	}
	ph := strings.TrimSuffix(strings.Repeat("?, ", len(states)), ", ")
	args := make([]any, len(states))
	for i, st := range states {
		args[i] = st
	}
	return s.querySessions(ctx, s.rd, `SELECT `+sessCols+` FROM sessions WHERE state IN (`+ph+`) ORDER BY created_at`, args...)
}

// SuspendedSessions implements store.Store.
func (s *Store) SuspendedSessions(ctx context.Context) ([]store.Session, error) {
	return s.querySessions(ctx, s.rd, `SELECT `+sessCols+` FROM sessions WHERE home = ? ORDER BY created_at`, store.HomeSuspended)
}

// Budget implements store.Store.
func (s *Store) Budget(ctx context.Context, agentID string, now time.Time) (store.Budget, error) {
	c, err := s.GetConnection(ctx, agentID)
	if err != nil {
		return store.Budget{}, err
	}
	day := store.Day(now)
	used, reserved, err := s.dayTotals(ctx, s.rd, agentID, day)
	if err != nil {
		return store.Budget{}, err
	}
	return store.Budget{
		Day: day, DailySeconds: c.DailySeconds, UsedSeconds: used, ReservedSeconds: reserved,
		LeftSeconds: max(c.DailySeconds-used-reserved, 0), ResetsAt: store.NextMidnight(now),
	}, nil
}

// Usage implements store.Store. A live session counts the time it has run
// so far; an ended one its charge. Both are capped at the session's expiry.
func (s *Store) Usage(ctx context.Context, by string, from, to, now time.Time) ([]store.UsageRow, error) {
	col := "provider"
	if by == "workspace" {
		col = "workspace"
	} else if by != "provider" {
		return nil, fmt.Errorf("usage by %q: want provider or workspace", by)
	}
	nowMS := ms(now)
	return queryAll(ctx, s.rd, s.q(`SELECT `+col+`,
		CAST(COALESCE(SUM(CASE WHEN state IN `+liveStates+`
			THEN (CASE WHEN ? < expires_at THEN ? ELSE expires_at END - created_at) / 1000
			ELSE charged_seconds END), 0) AS BIGINT),
		COUNT(*)
		FROM sessions WHERE created_at >= ? AND created_at < ?
		GROUP BY `+col+` ORDER BY `+col), []any{nowMS, nowMS, ms(from), ms(to)},
		func(row rowScanner) (store.UsageRow, error) {
			var r store.UsageRow
			err := row.Scan(&r.Key, &r.Seconds, &r.Sessions)
			return r, err
		})
}

var _ store.Store = (*Store)(nil)
