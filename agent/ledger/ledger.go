// Package ledger is the lending agent's local record of the computers it
// ran for a supervisor: one row per session with its agent, workspace and
// seconds, in SQLite (modernc.org/sqlite, WAL) in the user's data folder.
// It answers today's lending seconds, a daily history and totals by agent
// and by workspace, and it is what the agent reads after a restart to
// decide which containers to adopt.
package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// FileName is the ledger's file in the agent's data folder.
const FileName = "ledger.db"

// ErrNotFound is returned for a session the ledger has no row for.
var ErrNotFound = errors.New("ledger: no such session")

// Session is one computer lent to a supervisor.
type Session struct {
	ComputerID string // the supervisor's computer id; the row's key
	SessionID  string
	AttemptID  string
	Agent      string // the AI agent using it
	Workspace  string
	Image      string
	// Deployment is the supervisor's deployment id, reported back when it
	// lists the agent's computers.
	Deployment string
	MachineID  string // the container's name once it exists
	// TokenHash is the hex SHA-256 of the computer's token (never the
	// token), so that a restarted agent can recognise it again.
	TokenHash string
	// Day is the owner's local day (YYYY-MM-DD) the session counts on.
	Day       string
	StartedAt time.Time
	ExpiresAt time.Time
	EndedAt   time.Time // zero while it runs
	// Seconds is the time charged once it ended, capped at its expiry.
	Seconds int64
	// EndReason says why it ended (stopped, expired, vanished, ...).
	EndReason string
}

// Open reports whether the session still runs.
func (s Session) Open() bool { return s.EndedAt.IsZero() }

// SecondsAt is the session's time at now: its charge once ended, otherwise
// the time since it started capped at its expiry.
func (s Session) SecondsAt(now time.Time) int64 {
	if !s.Open() {
		return s.Seconds
	}
	return Charge(s.StartedAt, s.ExpiresAt, now)
}

// Charge is the seconds from start to end, capped at expires, never negative.
func Charge(start, expires, end time.Time) int64 {
	if end.After(expires) {
		end = expires
	}
	if !end.After(start) {
		return 0
	}
	return int64(end.Sub(start).Seconds())
}

// Row is the lending of one day, agent or workspace.
type Row struct {
	Key      string
	Seconds  int64
	Sessions int64
}

// Ledger is the agent's session record. It is safe for concurrent use.
type Ledger struct {
	db *sql.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS sessions (
	computer_id TEXT PRIMARY KEY,
	session_id  TEXT NOT NULL,
	attempt_id  TEXT NOT NULL,
	agent       TEXT NOT NULL,
	workspace   TEXT NOT NULL,
	image       TEXT NOT NULL,
	deployment  TEXT NOT NULL,
	machine_id  TEXT NOT NULL DEFAULT '',
	token_hash  TEXT NOT NULL DEFAULT '',
	day         TEXT NOT NULL,
	started_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	ended_at    INTEGER NOT NULL DEFAULT 0,
	seconds     INTEGER NOT NULL DEFAULT 0,
	end_reason  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS sessions_day ON sessions (day);
CREATE INDEX IF NOT EXISTS sessions_open ON sessions (ended_at) WHERE ended_at = 0;
CREATE TABLE IF NOT EXISTS kept (
	kind TEXT NOT NULL,
	name TEXT NOT NULL,
	kept_at INTEGER NOT NULL,
	PRIMARY KEY (kind, name)
);
`

// OpenFile opens (creating if needed) the ledger at path.
func OpenFile(ctx context.Context, path string) (*Ledger, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	return &Ledger{db: db}, nil
}

// Close closes the ledger's database.
func (l *Ledger) Close() error { return l.db.Close() }

func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromUnix(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Begin records a session that is starting. Beginning a computer id that is
// already recorded replaces an ended row and fails for an open one.
func (l *Ledger) Begin(ctx context.Context, s Session) error {
	res, err := l.db.ExecContext(ctx, `
INSERT INTO sessions (computer_id, session_id, attempt_id, agent, workspace, image, deployment, machine_id, token_hash, day, started_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (computer_id) DO UPDATE SET
	session_id = excluded.session_id, attempt_id = excluded.attempt_id, agent = excluded.agent,
	workspace = excluded.workspace, image = excluded.image, deployment = excluded.deployment,
	machine_id = excluded.machine_id, token_hash = excluded.token_hash, day = excluded.day, started_at = excluded.started_at,
	expires_at = excluded.expires_at, ended_at = 0, seconds = 0, end_reason = ''
WHERE sessions.ended_at <> 0`,
		s.ComputerID, s.SessionID, s.AttemptID, s.Agent, s.Workspace, s.Image, s.Deployment, s.MachineID, s.TokenHash,
		s.Day, unix(s.StartedAt), unix(s.ExpiresAt))
	if err != nil {
		return fmt.Errorf("ledger: begin %s: %w", s.ComputerID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("ledger: begin %s: a session for that computer is still open", s.ComputerID)
	}
	return nil
}

// SetMachine records the container of an open session.
func (l *Ledger) SetMachine(ctx context.Context, computerID, machineID string) error {
	_, err := l.db.ExecContext(ctx, `UPDATE sessions SET machine_id = ? WHERE computer_id = ? AND ended_at = 0`, machineID, computerID)
	if err != nil {
		return fmt.Errorf("ledger: machine of %s: %w", computerID, err)
	}
	return nil
}

// End closes an open session at end, charging its time up to its expiry.
// Ending a session that has ended is a no-op; it reports whether this call
// ended it.
func (l *Ledger) End(ctx context.Context, computerID string, end time.Time, reason string) (bool, error) {
	s, err := l.Get(ctx, computerID)
	if err != nil {
		return false, err
	}
	if !s.Open() {
		return false, nil
	}
	res, err := l.db.ExecContext(ctx, `UPDATE sessions SET ended_at = ?, seconds = ?, end_reason = ? WHERE computer_id = ? AND ended_at = 0`,
		unix(end), Charge(s.StartedAt, s.ExpiresAt, end), reason, computerID)
	if err != nil {
		return false, fmt.Errorf("ledger: end %s: %w", computerID, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Forget removes a session that never ran (its create failed), so that it
// counts nothing.
func (l *Ledger) Forget(ctx context.Context, computerID string) error {
	_, err := l.db.ExecContext(ctx, `DELETE FROM sessions WHERE computer_id = ? AND ended_at = 0`, computerID)
	if err != nil {
		return fmt.Errorf("ledger: forget %s: %w", computerID, err)
	}
	return nil
}

const columns = `computer_id, session_id, attempt_id, agent, workspace, image, deployment, machine_id, token_hash, day, started_at, expires_at, ended_at, seconds, end_reason`

func scan(sc interface{ Scan(...any) error }) (Session, error) {
	var s Session
	var started, expires, ended int64
	err := sc.Scan(&s.ComputerID, &s.SessionID, &s.AttemptID, &s.Agent, &s.Workspace, &s.Image, &s.Deployment,
		&s.MachineID, &s.TokenHash, &s.Day, &started, &expires, &ended, &s.Seconds, &s.EndReason)
	s.StartedAt, s.ExpiresAt, s.EndedAt = fromUnix(started), fromUnix(expires), fromUnix(ended)
	return s, err
}

// Get returns the session of a computer, or ErrNotFound.
func (l *Ledger) Get(ctx context.Context, computerID string) (Session, error) {
	s, err := scan(l.db.QueryRowContext(ctx, `SELECT `+columns+` FROM sessions WHERE computer_id = ?`, computerID))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("ledger: get %s: %w", computerID, err)
	}
	return s, nil
}

// OpenSessions lists the sessions that have not ended, oldest first.
func (l *Ledger) OpenSessions(ctx context.Context) ([]Session, error) {
	return l.query(ctx, `SELECT `+columns+` FROM sessions WHERE ended_at = 0 ORDER BY started_at, computer_id`)
}

// Sessions lists the sessions counted on days from..to (inclusive,
// YYYY-MM-DD), oldest first.
func (l *Ledger) Sessions(ctx context.Context, from, to string) ([]Session, error) {
	return l.query(ctx, `SELECT `+columns+` FROM sessions WHERE day >= ? AND day <= ? ORDER BY started_at, computer_id`, from, to)
}

func (l *Ledger) query(ctx context.Context, q string, args ...any) ([]Session, error) {
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		s, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// DaySeconds is the lending of one day at now: ended sessions' charges plus
// the time so far of running ones.
func (l *Ledger) DaySeconds(ctx context.Context, day string, now time.Time) (int64, error) {
	ss, err := l.Sessions(ctx, day, day)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range ss {
		n += s.SecondsAt(now)
	}
	return n, nil
}

// Totals sums the sessions of days from..to at now, by day, by agent and by
// workspace; each list is sorted by key (days) or by most seconds first.
func (l *Ledger) Totals(ctx context.Context, from, to string, now time.Time) (days, agents, workspaces []Row, err error) {
	ss, err := l.Sessions(ctx, from, to)
	if err != nil {
		return nil, nil, nil, err
	}
	byDay, byAgent, byWS := map[string]*Row{}, map[string]*Row{}, map[string]*Row{}
	add := func(m map[string]*Row, k string, sec int64) {
		r := m[k]
		if r == nil {
			r = &Row{Key: k}
			m[k] = r
		}
		r.Seconds += sec
		r.Sessions++
	}
	for _, s := range ss {
		sec := s.SecondsAt(now)
		add(byDay, s.Day, sec)
		add(byAgent, s.Agent, sec)
		add(byWS, s.Workspace, sec)
	}
	return sorted(byDay, false), sorted(byAgent, true), sorted(byWS, true), nil
}

func sorted(m map[string]*Row, bySeconds bool) []Row {
	out := make([]Row, 0, len(m))
	for _, r := range m {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Row) int {
		if bySeconds && a.Seconds != b.Seconds {
			return cmp.Compare(b.Seconds, a.Seconds)
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// Keep records that the owner chose to keep a leftover, so that it is not
// offered for cleanup again.
func (l *Ledger) Keep(ctx context.Context, kind, name string, now time.Time) error {
	_, err := l.db.ExecContext(ctx, `INSERT INTO kept (kind, name, kept_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, kind, name, unix(now))
	if err != nil {
		return fmt.Errorf("ledger: keep %s %s: %w", kind, name, err)
	}
	return nil
}

// Kept reports whether the owner chose to keep a leftover.
func (l *Ledger) Kept(ctx context.Context, kind, name string) (bool, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM kept WHERE kind = ? AND name = ?`, kind, name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("ledger: kept %s %s: %w", kind, name, err)
	}
	return n > 0, nil
}
