package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

const archiveCols = `agent_id, name, workspace, object_key, bytes, sha256, image, session_id, created_at`

func scanArchive(row rowScanner) (store.Archive, error) {
	var a store.Archive
	var created int64
	err := row.Scan(&a.AgentID, &a.Name, &a.Workspace, &a.Key, &a.Bytes, &a.SHA256, &a.Image, &a.SessionID, &created)
	a.CreatedAt = fromMS(created)
	return a, err
}

// PutArchive implements store.Archives. The agent's row orders the writers
// of one agent's archives: on PostgreSQL it stays locked (FOR UPDATE)
// until the archive is written, so two checkpoints never both take the
// last place.
func (s *Store) PutArchive(ctx context.Context, a store.Archive, maxCheckpoints int) (store.Archive, bool, error) {
	var old store.Archive
	var ok bool
	err := s.tx(ctx, func(tx *sql.Tx) error {
		lock := ""
		if s.dialect == postgres {
			lock = " FOR UPDATE"
		}
		var id string
		err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM agents WHERE id = ?`+lock), a.AgentID).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("agent %s: %w", a.AgentID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		old, err = scanArchive(tx.QueryRowContext(ctx, s.q(`SELECT `+archiveCols+` FROM archives WHERE agent_id = ? AND name = ?`), a.AgentID, a.Name))
		switch {
		case err == nil:
			ok = true
		case !errors.Is(err, sql.ErrNoRows):
			return err
		case a.Name != store.SleepArchive:
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM archives WHERE agent_id = ? AND name <> ''`), a.AgentID).Scan(&n); err != nil {
				return err
			}
			if n >= maxCheckpoints {
				return &store.CheckpointLimitError{Limit: maxCheckpoints}
			}
		}
		if ok {
			_, err = tx.ExecContext(ctx, s.q(`UPDATE archives SET workspace = ?, object_key = ?, bytes = ?, sha256 = ?, image = ?, session_id = ?, created_at = ?
				WHERE agent_id = ? AND name = ?`), a.Workspace, a.Key, a.Bytes, a.SHA256, a.Image, a.SessionID, ms(a.CreatedAt), a.AgentID, a.Name)
		} else {
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO archives (`+archiveCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				a.AgentID, a.Name, a.Workspace, a.Key, a.Bytes, a.SHA256, a.Image, a.SessionID, ms(a.CreatedAt))
		}
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrCheckpointLimit) || errors.Is(err, store.ErrNotFound) {
			return store.Archive{}, false, err
		}
		return store.Archive{}, false, fmt.Errorf("put archive %q of agent %s: %w", a.Name, a.AgentID, err)
	}
	return old, ok, nil
}

// GetArchive implements store.Archives.
func (s *Store) GetArchive(ctx context.Context, agentID, name string) (store.Archive, error) {
	a, err := scanArchive(s.rd.QueryRowContext(ctx, s.q(`SELECT `+archiveCols+` FROM archives WHERE agent_id = ? AND name = ?`), agentID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("archive %q of agent %s: %w", name, agentID, store.ErrNotFound)
	}
	return a, err
}

// ArchivesOf implements store.Archives.
func (s *Store) ArchivesOf(ctx context.Context, agentID string) ([]store.Archive, error) {
	return queryAll(ctx, s.rd, s.q(`SELECT `+archiveCols+` FROM archives WHERE agent_id = ? ORDER BY created_at, name`), []any{agentID}, scanArchive)
}

// DeleteArchive implements store.Archives.
func (s *Store) DeleteArchive(ctx context.Context, agentID, name string) (store.Archive, error) {
	var a store.Archive
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		a, err = scanArchive(tx.QueryRowContext(ctx, s.q(`SELECT `+archiveCols+` FROM archives WHERE agent_id = ? AND name = ?`), agentID, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("archive %q of agent %s: %w", name, agentID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM archives WHERE agent_id = ? AND name = ?`), agentID, name)
		return err
	})
	return a, err
}

// ArchiveKeys implements store.Archives.
func (s *Store) ArchiveKeys(ctx context.Context) ([]string, error) {
	return queryAll(ctx, s.rd, `SELECT object_key FROM archives ORDER BY object_key`, nil, func(row rowScanner) (string, error) {
		var k string
		err := row.Scan(&k)
		return k, err
	})
}

// Stored implements store.Archives.
func (s *Store) Stored(ctx context.Context) ([]store.StoredRow, error) {
	return queryAll(ctx, s.rd, `SELECT agent_id, MAX(workspace), CAST(SUM(bytes) AS BIGINT), COUNT(*)
		FROM archives GROUP BY agent_id ORDER BY agent_id`, nil, func(row rowScanner) (store.StoredRow, error) {
		var r store.StoredRow
		err := row.Scan(&r.AgentID, &r.Workspace, &r.Bytes, &r.Archives)
		return r, err
	})
}

// TouchSession implements store.Archives.
func (s *Store) TouchSession(ctx context.Context, id string, sleepAt time.Time) error {
	_, err := s.db.ExecContext(ctx, s.q(`UPDATE sessions SET sleep_at = ? WHERE id = ? AND state = 'running' AND sleep_at > 0`), ms(sleepAt), id)
	if err != nil {
		return fmt.Errorf("touch session %s: %w", id, err)
	}
	return nil
}
