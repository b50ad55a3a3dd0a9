package store

import (
	"context"
	"time"
)

// Seats keeps the viewer seats of live view: which viewers watch a
// session's desktop, each until its seat expires. Every supervisor that
// shares a store counts the same seats, so a desktop's limit holds across
// all of them. A seat is held at now while now is before its expiry.
// Every Store implements it.
type Seats interface {
	// TakeSeat seats viewer at the session's desktop until expires and
	// returns how many seats the session holds at now, this one included.
	// In one step it drops the session's seats that expired by now, refuses
	// with a *SeatsFullError when viewers other than this one hold limit
	// seats or more, and otherwise records the viewer's seat (a viewer
	// seated already gets the new expiry). It returns ErrNotFound when the
	// session does not exist.
	TakeSeat(ctx context.Context, session, viewer string, expires, now time.Time, limit int) (held int, err error)
	// RenewSeat moves the expiry of a seat still held at now to expires;
	// ErrNotFound when the viewer left or its seat lapsed.
	RenewSeat(ctx context.Context, session, viewer string, expires, now time.Time) error
	// LeaveSeat frees a viewer's seat; a seat that is gone already is no
	// error.
	LeaveSeat(ctx context.Context, session, viewer string) error
	// Seated reports whether viewer holds a seat at the session's desktop
	// at now.
	Seated(ctx context.Context, session, viewer string, now time.Time) (bool, error)
	// SeatsHeld counts the session's seats held at now.
	SeatsHeld(ctx context.Context, session string, now time.Time) (int, error)
	// PurgeSeats deletes the seats of every session that expired by now.
	PurgeSeats(ctx context.Context, now time.Time) (int64, error)
}

// DesktopSeats keeps the seats of the desktop tools (screenshot and
// actions): which holders use a session's desktop, each until its seat
// expires. A holder is whoever calls the tools (an MCP server, a key);
// the supervisor names it. The rules are those of Seats, in a count of
// their own: viewers of live view take no desktop seat. Every Store
// implements it.
type DesktopSeats interface {
	// TakeDesktopSeat seats holder at the session's desktop until expires
	// and returns how many desktop seats the session holds at now, this
	// one included. In one step it drops the session's desktop seats that
	// expired by now, refuses with a *SeatsFullError (Kind "desktop",
	// FreesAt the first expiry among the others) when holders other than
	// this one hold limit seats or more, and otherwise records the seat (a
	// holder seated already gets the new expiry). It returns ErrNotFound
	// when the session does not exist.
	TakeDesktopSeat(ctx context.Context, session, holder string, expires, now time.Time, limit int) (held int, err error)
	// PurgeDesktopSeats deletes the desktop seats of every session that
	// expired by now.
	PurgeDesktopSeats(ctx context.Context, now time.Time) (int64, error)
}
