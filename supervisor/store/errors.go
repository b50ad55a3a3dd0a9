package store

import (
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
