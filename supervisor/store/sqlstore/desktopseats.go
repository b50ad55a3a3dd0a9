package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// TakeDesktopSeat implements store.DesktopSeats, as TakeSeat does for
// viewers.
func (s *Store) TakeDesktopSeat(ctx context.Context, session, holder string, expires, now time.Time, limit int) (int, error) {
	return s.takeSeat(ctx, desktopSeats, session, holder, expires, now, limit)
}

// PurgeDesktopSeats implements store.DesktopSeats.
func (s *Store) PurgeDesktopSeats(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM desktop_seats WHERE expires_at <= ?`), ms(now))
	if err != nil {
		return 0, fmt.Errorf("purge desktop seats: %w", err)
	}
	return res.RowsAffected()
}

var _ store.DesktopSeats = (*Store)(nil)
