package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

const poolCols = `computer_id, machine_id, provider, image, attempt_id, endpoint, owner, state, session_id, created_at, claimed_at`

func scanPoolMember(row rowScanner) (store.PoolMember, error) {
	var m store.PoolMember
	var created, claimed int64
	err := row.Scan(&m.ComputerID, &m.MachineID, &m.Provider, &m.Image, &m.AttemptID, &m.Endpoint, &m.Owner,
		&m.State, &m.SessionID, &created, &claimed)
	m.CreatedAt, m.ClaimedAt = fromMS(created), fromMS(claimed)
	return m, err
}

// AddPoolMember implements store.Pool.
func (s *Store) AddPoolMember(ctx context.Context, m store.PoolMember) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO pool_members (`+poolCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		m.ComputerID, m.MachineID, m.Provider, m.Image, m.AttemptID, m.Endpoint, m.Owner, m.State, m.SessionID,
		ms(m.CreatedAt), ms(m.ClaimedAt))
	if isUnique(err) {
		return fmt.Errorf("pool member %s: %w", m.ComputerID, store.ErrConflict)
	}
	return err
}

// UpdatePoolMember implements store.Pool.
func (s *Store) UpdatePoolMember(ctx context.Context, m store.PoolMember, from string) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE pool_members SET state = ?, machine_id = ?, endpoint = ? WHERE computer_id = ? AND state = ?`),
		m.State, m.MachineID, m.Endpoint, m.ComputerID, from)
	if err != nil {
		return fmt.Errorf("update pool member %s: %w", m.ComputerID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return s.poolMiss(ctx, m.ComputerID, from)
	}
	return nil
}

// DeletePoolMember implements store.Pool.
func (s *Store) DeletePoolMember(ctx context.Context, computerID, state string) error {
	query, args := `DELETE FROM pool_members WHERE computer_id = ?`, []any{computerID}
	if state != "" {
		query += ` AND state = ?`
		args = append(args, state)
	}
	res, err := s.db.ExecContext(ctx, s.q(query), args...)
	if err != nil {
		return fmt.Errorf("delete pool member %s: %w", computerID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return s.poolMiss(ctx, computerID, state)
	}
	return nil
}

// poolMiss explains why a write to a member touched no row.
func (s *Store) poolMiss(ctx context.Context, computerID, state string) error {
	if _, err := s.GetPoolMember(ctx, computerID); err != nil {
		return err
	}
	return fmt.Errorf("pool member %s not %s: %w", computerID, state, store.ErrStale)
}

// GetPoolMember implements store.Pool.
func (s *Store) GetPoolMember(ctx context.Context, computerID string) (store.PoolMember, error) {
	m, err := scanPoolMember(s.rd.QueryRowContext(ctx, s.q(`SELECT `+poolCols+` FROM pool_members WHERE computer_id = ?`), computerID))
	if errors.Is(err, sql.ErrNoRows) {
		return m, fmt.Errorf("pool member %s: %w", computerID, store.ErrNotFound)
	}
	return m, err
}

// PoolMembers implements store.Pool.
func (s *Store) PoolMembers(ctx context.Context) ([]store.PoolMember, error) {
	return queryAll(ctx, s.rd, `SELECT `+poolCols+` FROM pool_members ORDER BY created_at, computer_id`, nil, scanPoolMember)
}

// claimPoolMember claims, inside a reservation's transaction, the oldest
// waiting member of provider and image that owner made. SQLite has one
// writer at a time; on PostgreSQL concurrent reservations skip the rows
// another one has locked, so each claims a different member.
func (s *Store) claimPoolMember(ctx context.Context, tx *sql.Tx, provider, image, owner, sessionID string, now time.Time) (store.PoolMember, bool, error) {
	lock := ""
	if s.dialect == postgres {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	m, err := scanPoolMember(tx.QueryRowContext(ctx, s.q(`SELECT `+poolCols+` FROM pool_members
		WHERE provider = ? AND image = ? AND owner = ? AND state = ?
		ORDER BY created_at, computer_id LIMIT 1`+lock), provider, image, owner, store.PoolWaiting))
	if errors.Is(err, sql.ErrNoRows) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("claim pool member: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE pool_members SET state = ?, session_id = ?, claimed_at = ?
		WHERE computer_id = ? AND state = ?`), store.PoolClaimed, sessionID, ms(now), m.ComputerID, store.PoolWaiting)
	if err != nil {
		return m, false, fmt.Errorf("claim pool member %s: %w", m.ComputerID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return m, false, nil // taken between the read and the write
	}
	m.State, m.SessionID, m.ClaimedAt = store.PoolClaimed, sessionID, now.UTC()
	return m, true, nil
}
