package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// seatTable names the table of one kind of seats and its column of who
// holds a seat: viewer_seats (viewer_id) for live view, desktop_seats
// (holder_id) for the desktop tools.
type seatTable struct {
	table, who, kind string
}

var (
	viewerSeats  = seatTable{table: "viewer_seats", who: "viewer_id"}
	desktopSeats = seatTable{table: "desktop_seats", who: "holder_id", kind: "desktop"}
)

// TakeSeat implements store.Seats.
func (s *Store) TakeSeat(ctx context.Context, session, viewer string, expires, now time.Time, limit int) (int, error) {
	return s.takeSeat(ctx, viewerSeats, session, viewer, expires, now, limit)
}

// takeSeat takes a seat of table t. The session's row orders those that
// take seats of one desktop at once: SQLite has one writer at a time, and
// on PostgreSQL the row stays locked (FOR UPDATE) until the seat is
// written, so two supervisors never both take the last seat.
func (s *Store) takeSeat(ctx context.Context, t seatTable, session, who string, expires, now time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("take seat at session %s: limit is %d, want at least 1", session, limit)
	}
	if !now.Before(expires) {
		return 0, fmt.Errorf("take seat at session %s: expiry %s is not after now (%s)", session,
			expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	held := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		lock := ""
		if s.dialect == postgres {
			lock = " FOR UPDATE"
		}
		var id string
		err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM sessions WHERE id = ?`+lock), session).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("session %s: %w", session, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM `+t.table+` WHERE session_id = ? AND expires_at <= ?`), session, ms(now)); err != nil {
			return err
		}
		var others int
		var first sql.NullInt64
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*), MIN(expires_at) FROM `+t.table+` WHERE session_id = ? AND `+t.who+` <> ?`),
			session, who).Scan(&others, &first); err != nil {
			return err
		}
		if others >= limit {
			return &store.SeatsFullError{Held: others, Limit: limit, FreesAt: fromMS(first.Int64), Kind: t.kind}
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO `+t.table+` (session_id, `+t.who+`, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (session_id, `+t.who+`) DO UPDATE SET expires_at = excluded.expires_at`),
			session, who, ms(expires)); err != nil {
			return err
		}
		held = others + 1
		return nil
	})
	if err != nil {
		var full *store.SeatsFullError
		if errors.As(err, &full) || errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		return 0, fmt.Errorf("take seat at session %s: %w", session, err)
	}
	return held, nil
}

// RenewSeat implements store.Seats.
func (s *Store) RenewSeat(ctx context.Context, session, viewer string, expires, now time.Time) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE viewer_seats SET expires_at = ?
		WHERE session_id = ? AND viewer_id = ? AND expires_at > ?`), ms(expires), session, viewer, ms(now))
	if err != nil {
		return fmt.Errorf("renew seat of viewer %s at session %s: %w", viewer, session, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("seat of viewer %s at session %s: %w", viewer, session, store.ErrNotFound)
	}
	return nil
}

// LeaveSeat implements store.Seats.
func (s *Store) LeaveSeat(ctx context.Context, session, viewer string) error {
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM viewer_seats WHERE session_id = ? AND viewer_id = ?`), session, viewer); err != nil {
		return fmt.Errorf("free seat of viewer %s at session %s: %w", viewer, session, err)
	}
	return nil
}

// Seated implements store.Seats.
func (s *Store) Seated(ctx context.Context, session, viewer string, now time.Time) (bool, error) {
	var n int
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM viewer_seats WHERE session_id = ? AND viewer_id = ? AND expires_at > ?`),
		session, viewer, ms(now)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("seat of viewer %s at session %s: %w", viewer, session, err)
	}
	return n > 0, nil
}

// SeatsHeld implements store.Seats.
func (s *Store) SeatsHeld(ctx context.Context, session string, now time.Time) (int, error) {
	var n int
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM viewer_seats WHERE session_id = ? AND expires_at > ?`),
		session, ms(now)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("seats of session %s: %w", session, err)
	}
	return n, nil
}

// PurgeSeats implements store.Seats.
func (s *Store) PurgeSeats(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM viewer_seats WHERE expires_at <= ?`), ms(now))
	if err != nil {
		return 0, fmt.Errorf("purge viewer seats: %w", err)
	}
	return res.RowsAffected()
}

var _ store.Seats = (*Store)(nil)
