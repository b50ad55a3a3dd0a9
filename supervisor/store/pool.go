package store

import (
	"context"
	"time"
)

// States of a warm-pool member.
const (
	PoolCreating = "creating" // recorded before the provider is asked
	PoolWaiting  = "waiting"  // started, unbound, ready to be claimed
	PoolClaimed  = "claimed"  // taken by a session (SessionID); never waits again
)

// PoolMember is a computer made ahead of time for a warm pool. Its machine
// labels never change (Docker labels are immutable), so the store is what
// says whether it still waits or which session claimed it.
type PoolMember struct {
	ComputerID string // Berth's id of the computer; the member's key
	MachineID  string // the provider's machine id, once it is made
	Provider   string
	Image      string
	AttemptID  string // the attempt label of its machine
	Endpoint   string
	// Owner is the supervisor instance that made it: the only one that
	// holds its bind secret, so the only one that may claim it.
	Owner     string
	State     string
	SessionID string // the claiming session, once claimed
	CreatedAt time.Time
	ClaimedAt time.Time
}

// Pool records the members of the warm pools; every Store implements it.
// A member is claimed by Reserve (see Reservation.PoolOwner), in the same
// transaction that reserves the session's time.
type Pool interface {
	// AddPoolMember records a new member; ErrConflict when its computer id
	// is recorded already.
	AddPoolMember(ctx context.Context, m PoolMember) error
	// UpdatePoolMember sets a member's state, machine id and endpoint if
	// its stored state is still from; ErrStale otherwise, ErrNotFound when
	// it is gone.
	UpdatePoolMember(ctx context.Context, m PoolMember, from string) error
	// DeletePoolMember removes a member, only while it is in state when
	// state is set; ErrStale when it is in another state, ErrNotFound when
	// it is gone.
	DeletePoolMember(ctx context.Context, computerID, state string) error
	GetPoolMember(ctx context.Context, computerID string) (PoolMember, error)
	// PoolMembers lists every member of every owner, oldest first.
	PoolMembers(ctx context.Context) ([]PoolMember, error)
}
