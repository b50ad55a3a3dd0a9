package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

const callCols = `key, agent_id, tool, request_hash, state, owner, status, response, created_at, finished_at`

func scanCall(row rowScanner) (store.Call, error) {
	var c store.Call
	var resp string
	var created, finished int64
	err := row.Scan(&c.Key, &c.AgentID, &c.Tool, &c.RequestHash, &c.State, &c.Owner, &c.Status, &resp, &created, &finished)
	c.Response = []byte(resp)
	c.CreatedAt, c.FinishedAt = fromMS(created), fromMS(finished)
	return c, err
}

// BeginCall implements store.Calls.
func (s *Store) BeginCall(ctx context.Context, c store.Call) (store.Call, bool, error) {
	c.State = store.CallPending
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO calls (`+callCols+`) VALUES (?, ?, ?, ?, ?, ?, 0, '', ?, 0)
		ON CONFLICT (key) DO NOTHING`),
		c.Key, c.AgentID, c.Tool, c.RequestHash, c.State, c.Owner, ms(c.CreatedAt))
	if err != nil {
		return c, false, fmt.Errorf("begin call %s: %w", c.Key, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return c, true, nil
	}
	existing, err := s.GetCall(ctx, c.Key)
	return existing, false, err
}

// FinishCall implements store.Calls.
func (s *Store) FinishCall(ctx context.Context, key, owner string, status int, response []byte, now time.Time) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE calls SET state = ?, status = ?, response = ?, finished_at = ?
		WHERE key = ? AND state = ? AND owner = ?`),
		store.CallDone, status, string(response), ms(now), key, store.CallPending, owner)
	if err != nil {
		return fmt.Errorf("finish call %s: %w", key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("call %s not pending under %s: %w", key, owner, store.ErrStale)
	}
	return nil
}

// GetCall implements store.Calls.
func (s *Store) GetCall(ctx context.Context, key string) (store.Call, error) {
	c, err := scanCall(s.rd.QueryRowContext(ctx, s.q(`SELECT `+callCols+` FROM calls WHERE key = ?`), key))
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("call %s: %w", key, store.ErrNotFound)
	}
	return c, err
}

// AgentCalls implements store.Calls.
func (s *Store) AgentCalls(ctx context.Context, agentID string, from, to time.Time, limit int) ([]store.Call, error) {
	return queryAll(ctx, s.rd, s.q(`SELECT `+callCols+` FROM calls WHERE agent_id = ? AND created_at >= ? AND created_at < ? ORDER BY created_at, key LIMIT ?`),
		[]any{agentID, ms(from), ms(to), limit}, scanCall)
}

// PurgeCalls implements store.Calls.
func (s *Store) PurgeCalls(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM calls WHERE created_at < ?`), ms(before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Heartbeat implements store.Calls.
func (s *Store) Heartbeat(ctx context.Context, id string, now time.Time) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO instances (id, started_at, heartbeat_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`), id, ms(now), ms(now))
	return err
}

// InstanceAlive implements store.Calls.
func (s *Store) InstanceAlive(ctx context.Context, id string, cutoff time.Time) (bool, error) {
	var n int
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM instances WHERE id = ? AND heartbeat_at >= ?`), id, ms(cutoff)).Scan(&n)
	return n > 0, err
}

// ClaimSession implements store.Calls.
func (s *Store) ClaimSession(ctx context.Context, id, owner string, now, until time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE sessions SET owner = ?, claim_until = ?
		WHERE id = ? AND (claim_until <= ? OR owner = ?)`), owner, ms(until), id, ms(now), owner)
	if err != nil {
		return false, fmt.Errorf("claim session %s: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// TakeSession implements store.Calls.
func (s *Store) TakeSession(ctx context.Context, id, from, owner string, until time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE sessions SET owner = ?, claim_until = ? WHERE id = ? AND owner = ?`),
		owner, ms(until), id, from)
	if err != nil {
		return false, fmt.Errorf("take session %s: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

var _ store.Calls = (*Store)(nil)

// Meta implements store.Calls.
func (s *Store) Meta(ctx context.Context, key, def string) (string, error) {
	if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`), key, def); err != nil {
		return "", fmt.Errorf("meta %s: %w", key, err)
	}
	var v string
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT value FROM meta WHERE key = ?`), key).Scan(&v)
	return v, err
}
