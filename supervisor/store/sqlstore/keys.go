package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

const keyCols = `id, name, scope, workspace, agent_id, key_hash, created_at, last_used_at, expires_at, revoked_at, created_by`

func scanKey(sc rowScanner) (store.Key, error) {
	var k store.Key
	var created, used, expires, revoked int64
	err := sc.Scan(&k.ID, &k.Name, &k.Scope, &k.Workspace, &k.AgentID, &k.Hash, &created, &used, &expires, &revoked, &k.CreatedBy)
	k.CreatedAt, k.LastUsedAt, k.ExpiresAt, k.RevokedAt = fromMS(created), fromMS(used), fromMS(expires), fromMS(revoked)
	return k, err
}

// CreateKey implements store.Keys.
func (s *Store) CreateKey(ctx context.Context, k store.Key) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO api_keys (`+keyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		k.ID, k.Name, k.Scope, k.Workspace, k.AgentID, k.Hash, ms(k.CreatedAt), ms(k.LastUsedAt), ms(k.ExpiresAt), ms(k.RevokedAt), k.CreatedBy)
	if isUnique(err) {
		return fmt.Errorf("key %s: %w", k.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

// GetKey implements store.Keys.
func (s *Store) GetKey(ctx context.Context, id string) (store.Key, error) {
	k, err := scanKey(s.rd.QueryRowContext(ctx, s.q(`SELECT `+keyCols+` FROM api_keys WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("key %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return k, fmt.Errorf("key %s: %w", id, err)
	}
	return k, nil
}

// ListKeys implements store.Keys.
func (s *Store) ListKeys(ctx context.Context, workspace string) ([]store.Key, error) {
	q, args := `SELECT `+keyCols+` FROM api_keys ORDER BY created_at, id`, []any(nil)
	if workspace != "" {
		q, args = `SELECT `+keyCols+` FROM api_keys WHERE workspace = ? ORDER BY created_at, id`, []any{workspace}
	}
	out, err := queryAll(ctx, s.rd, s.q(q), args, scanKey)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

// RevokeKey implements store.Keys.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE api_keys SET revoked_at = CASE WHEN revoked_at = 0 THEN ? ELSE revoked_at END WHERE id = ?`), ms(at), id)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("key %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// TouchKey implements store.Keys.
func (s *Store) TouchKey(ctx context.Context, id string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, s.q(`UPDATE api_keys SET last_used_at = ? WHERE id = ?`), ms(at), id); err != nil {
		return fmt.Errorf("touch key %s: %w", id, err)
	}
	return nil
}

// AppendAudit implements store.Keys.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO audit_log (id, at, actor, workspace, action, target, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		e.ID, ms(e.At), e.Actor, e.Workspace, e.Action, e.Target, e.Detail)
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return nil
}

// Audit implements store.Keys.
func (s *Store) Audit(ctx context.Context, workspace string, before time.Time, limit int) ([]store.AuditEntry, error) {
	b := int64(1<<62 - 1)
	if !before.IsZero() {
		b = ms(before)
	}
	q, args := `SELECT id, at, actor, workspace, action, target, detail FROM audit_log WHERE at < ? ORDER BY at DESC, id DESC LIMIT ?`, []any{b, limit}
	if workspace != "" {
		q, args = `SELECT id, at, actor, workspace, action, target, detail FROM audit_log WHERE workspace = ? AND at < ? ORDER BY at DESC, id DESC LIMIT ?`, []any{workspace, b, limit}
	}
	out, err := queryAll(ctx, s.rd, s.q(q), args, func(row rowScanner) (store.AuditEntry, error) {
		var e store.AuditEntry
		var at int64
		err := row.Scan(&e.ID, &at, &e.Actor, &e.Workspace, &e.Action, &e.Target, &e.Detail)
		e.At = fromMS(at)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return out, nil
}

// Companions implements store.Pairing.
func (s *Store) Companions(ctx context.Context) ([]store.Companion, error) {
	out, err := queryAll(ctx, s.rd, `SELECT `+companionCols+` FROM companions ORDER BY created_at, id`, nil, func(row rowScanner) (store.Companion, error) {
		var c store.Companion
		var created, seen int64
		err := row.Scan(&c.ID, &c.Name, &c.TokenHash, &created, &seen)
		c.CreatedAt, c.LastSeenAt = fromMS(created), fromMS(seen)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list companions: %w", err)
	}
	return out, nil
}

// DeleteCompanion implements store.Pairing.
func (s *Store) DeleteCompanion(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM companions WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("delete companion %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("companion %s: %w", id, store.ErrNotFound)
	}
	return nil
}

var _ store.Keys = (*Store)(nil)
