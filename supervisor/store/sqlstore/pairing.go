package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// CreatePairCode implements store.Pairing.
func (s *Store) CreatePairCode(ctx context.Context, c store.PairCode) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO pair_codes (code_hash, name, created_at, expires_at, used_at, agent_id)
		VALUES (?, ?, ?, ?, 0, '')`), c.Hash, c.Name, ms(c.CreatedAt), ms(c.ExpiresAt))
	if isUnique(err) {
		return fmt.Errorf("pairing code: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create pairing code: %w", err)
	}
	return nil
}

// RedeemPairCode implements store.Pairing. The conditional UPDATE is the
// single-use check: on PostgreSQL a second redeem waits for the first's row
// lock and then finds the code used; SQLite runs one writer at a time.
func (s *Store) RedeemPairCode(ctx context.Context, codeHash string, now time.Time, c store.Companion) (store.Companion, error) {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var name string
		err := tx.QueryRowContext(ctx, s.q(`UPDATE pair_codes SET used_at = ?, agent_id = ?
			WHERE code_hash = ? AND used_at = 0 AND expires_at > ? RETURNING name`),
			ms(now), c.ID, codeHash, ms(now)).Scan(&name)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrPairCode
		}
		if err != nil {
			return err
		}
		if c.Name == "" {
			c.Name = name
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO companions (id, name, token_hash, created_at, last_seen_at)
			VALUES (?, ?, ?, ?, ?)`), c.ID, c.Name, c.TokenHash, ms(c.CreatedAt), ms(c.LastSeenAt))
		if isUnique(err) {
			return fmt.Errorf("companion %s: %w", c.ID, store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return store.Companion{}, fmt.Errorf("redeem pairing code: %w", err)
	}
	return c, nil
}

const companionCols = `id, name, token_hash, created_at, last_seen_at`

func (s *Store) companion(ctx context.Context, where, arg, what string) (store.Companion, error) {
	var c store.Companion
	var created, seen int64
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT `+companionCols+` FROM companions WHERE `+where+` = ?`), arg).
		Scan(&c.ID, &c.Name, &c.TokenHash, &created, &seen)
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("companion %s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("companion %s: %w", what, err)
	}
	c.CreatedAt, c.LastSeenAt = fromMS(created), fromMS(seen)
	return c, nil
}

// GetCompanion implements store.Pairing.
func (s *Store) GetCompanion(ctx context.Context, id string) (store.Companion, error) {
	return s.companion(ctx, "id", id, id)
}

// CompanionByTokenHash implements store.Pairing.
func (s *Store) CompanionByTokenHash(ctx context.Context, tokenHash string) (store.Companion, error) {
	return s.companion(ctx, "token_hash", tokenHash, "by token")
}

var _ store.Pairing = (*Store)(nil)
