package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

const linkCols = `lender_id, relay, connected_at, last_seen, version, expires_at`

// PutLenderLink implements store.LenderLinks.
func (s *Store) PutLenderLink(ctx context.Context, l store.LenderLink, now time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO lender_links (`+linkCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (lender_id) DO UPDATE SET relay = excluded.relay, connected_at = excluded.connected_at,
			last_seen = excluded.last_seen, version = excluded.version, expires_at = excluded.expires_at
		WHERE lender_links.relay = excluded.relay OR lender_links.expires_at <= ?
			OR lender_links.connected_at <= excluded.connected_at`),
		l.LenderID, l.Relay, ms(l.ConnectedAt), ms(l.LastSeen), l.Version, ms(l.Expires), ms(now))
	if err != nil {
		return false, fmt.Errorf("put lender link: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("put lender link: %w", err)
	}
	return n > 0, nil
}

// EndLenderLink implements store.LenderLinks.
func (s *Store) EndLenderLink(ctx context.Context, lenderID, relay string, t time.Time) error {
	if _, err := s.db.ExecContext(ctx, s.q(`UPDATE lender_links SET expires_at = ?, last_seen = ?
		WHERE lender_id = ? AND relay = ? AND expires_at > ?`), ms(t), ms(t), lenderID, relay, ms(t)); err != nil {
		return fmt.Errorf("end lender link: %w", err)
	}
	return nil
}

// GetLenderLink implements store.LenderLinks.
func (s *Store) GetLenderLink(ctx context.Context, lenderID string) (store.LenderLink, error) {
	l, err := scanLink(s.rd.QueryRowContext(ctx, s.q(`SELECT `+linkCols+` FROM lender_links WHERE lender_id = ?`), lenderID))
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("lender link %s: %w", lenderID, store.ErrNotFound)
	}
	if err != nil {
		return l, fmt.Errorf("lender link: %w", err)
	}
	return l, nil
}

// LenderLinks implements store.LenderLinks.
func (s *Store) LenderLinks(ctx context.Context) ([]store.LenderLink, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT `+linkCols+` FROM lender_links ORDER BY lender_id`)
	if err != nil {
		return nil, fmt.Errorf("lender links: %w", err)
	}
	defer rows.Close()
	var out []store.LenderLink
	for rows.Next() {
		l, err := scanLink(rows)
		if err != nil {
			return nil, fmt.Errorf("lender links: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func scanLink(r interface{ Scan(...any) error }) (store.LenderLink, error) {
	var l store.LenderLink
	var connected, seen, expires int64
	if err := r.Scan(&l.LenderID, &l.Relay, &connected, &seen, &l.Version, &expires); err != nil {
		return l, err
	}
	l.ConnectedAt, l.LastSeen, l.Expires = fromMS(connected), fromMS(seen), fromMS(expires)
	return l, nil
}

var _ store.LenderLinks = (*Store)(nil)
