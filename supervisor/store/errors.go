package store

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors of every Store.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("already exists")
	ErrLive     = errors.New("agent has a live session")
	ErrStale    = errors.New("session changed concurrently")
	// ErrSeatsFull is what a *SeatsFullError is (errors.Is).
	ErrSeatsFull = errors.New("every viewer seat is taken")
)

// BudgetError is returned by Reserve when today's budget is too small.
type BudgetError struct {
	LeftSeconds int
	MinSeconds  int
	ResetsAt    time.Time
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("daily budget has %d s left, a session needs at least %d s; it resets at %s",
		e.LeftSeconds, e.MinSeconds, e.ResetsAt.UTC().Format(time.RFC3339))
}

// SeatsFullError is returned by TakeSeat (and TakeDesktopSeat) when
// others hold every seat of a session's desktop.
type SeatsFullError struct {
	Held  int // seats held by others
	Limit int
	// FreesAt is when the first of the seats held by others expires.
	FreesAt time.Time
	// Kind is "desktop" for the seats of the desktop tools, "" for the
	// viewer seats of live view.
	Kind string
}

func (e *SeatsFullError) Error() string {
	return fmt.Sprintf("%s seats: %d held, the limit is %d", cmp.Or(e.Kind, "viewer"), e.Held, e.Limit)
}

// Is makes errors.Is(err, ErrSeatsFull) true.
func (e *SeatsFullError) Is(target error) bool { return target == ErrSeatsFull }

// ErrCheckpointLimit is what a *CheckpointLimitError is (errors.Is).
var ErrCheckpointLimit = errors.New("checkpoint limit reached")

// CheckpointLimitError is returned by PutArchive for a new checkpoint of
// an agent that has as many as it may keep.
type CheckpointLimitError struct {
	Limit int
}

func (e *CheckpointLimitError) Error() string {
	return fmt.Sprintf("the agent has %d checkpoints, the most it may keep", e.Limit)
}

// Is makes errors.Is(err, ErrCheckpointLimit) true.
func (e *CheckpointLimitError) Is(target error) bool { return target == ErrCheckpointLimit }
