package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

const consoleCols = `id_hash, csrf, actor, operator_mark, created_at, last_used, flash`

// AddConsoleSession implements store.ConsoleSessions.
func (s *Store) AddConsoleSession(ctx context.Context, x store.ConsoleSession) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO console_sessions (`+consoleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		x.IDHash, x.CSRF, x.Actor, x.OperatorMark, ms(x.CreatedAt), ms(x.LastUsed), x.Flash)
	if isUnique(err) {
		return fmt.Errorf("console session: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("add console session: %w", err)
	}
	return nil
}

// GetConsoleSession implements store.ConsoleSessions.
func (s *Store) GetConsoleSession(ctx context.Context, idHash string) (store.ConsoleSession, error) {
	var x store.ConsoleSession
	var created, used int64
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT `+consoleCols+` FROM console_sessions WHERE id_hash = ?`), idHash).
		Scan(&x.IDHash, &x.CSRF, &x.Actor, &x.OperatorMark, &created, &used, &x.Flash)
	if errors.Is(err, sql.ErrNoRows) {
		return x, fmt.Errorf("console session: %w", store.ErrNotFound)
	}
	if err != nil {
		return x, fmt.Errorf("console session: %w", err)
	}
	x.CreatedAt, x.LastUsed = fromMS(created), fromMS(used)
	return x, nil
}

// TouchConsoleSession implements store.ConsoleSessions.
func (s *Store) TouchConsoleSession(ctx context.Context, idHash string, now time.Time) error {
	if _, err := s.db.ExecContext(ctx, s.q(`UPDATE console_sessions SET last_used = ? WHERE id_hash = ? AND last_used < ?`), ms(now), idHash, ms(now)); err != nil {
		return fmt.Errorf("touch console session: %w", err)
	}
	return nil
}

// SetConsoleFlash implements store.ConsoleSessions.
func (s *Store) SetConsoleFlash(ctx context.Context, idHash, flash string) error {
	if _, err := s.db.ExecContext(ctx, s.q(`UPDATE console_sessions SET flash = ? WHERE id_hash = ?`), flash, idHash); err != nil {
		return fmt.Errorf("console flash: %w", err)
	}
	return nil
}

// DeleteConsoleSession implements store.ConsoleSessions.
func (s *Store) DeleteConsoleSession(ctx context.Context, idHash string) error {
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM console_sessions WHERE id_hash = ?`), idHash); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// PurgeConsoleSessions implements store.ConsoleSessions.
func (s *Store) PurgeConsoleSessions(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM console_sessions WHERE last_used < ?`), ms(before))
	if err != nil {
		return 0, fmt.Errorf("purge console sessions: %w", err)
	}
	return res.RowsAffected()
}

var _ store.ConsoleSessions = (*Store)(nil)
