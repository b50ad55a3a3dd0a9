package store

import (
	"context"
	"time"
)

// States of a tool call's idempotency record.
const (
	CallPending = "pending"
	CallDone    = "done"
)

// CallTTL is how long a tool call's outcome is kept for replays.
const CallTTL = 24 * time.Hour

// Call is the idempotency record of one tool call: the key a client sent
// (scoped to the agent), the hash of what it asked, and, once done, the
// answer every replay gets.
type Call struct {
	Key         string
	AgentID     string
	Tool        string
	RequestHash string
	State       string
	// Owner is the supervisor instance running the call; when it dies the
	// call's outcome is lost and the call is answered as uncertain.
	Owner      string
	Status     int
	Response   []byte
	CreatedAt  time.Time
	FinishedAt time.Time
}

// Calls keeps idempotency records and the liveness of supervisor
// instances; every Store implements it.
type Calls interface {
	// BeginCall records c as pending and returns (c, true). When a call with
	// the key exists it returns that record and false, whatever its hash.
	BeginCall(ctx context.Context, c Call) (Call, bool, error)
	// FinishCall stores the outcome of a pending call owned by owner. It
	// returns ErrStale when the call is no longer pending under owner.
	FinishCall(ctx context.Context, key, owner string, status int, response []byte, now time.Time) error
	GetCall(ctx context.Context, key string) (Call, error)
	// AgentCalls lists the agent's call records created in [from, to),
	// oldest first, at most limit of them.
	AgentCalls(ctx context.Context, agentID string, from, to time.Time, limit int) ([]Call, error)
	// PurgeCalls deletes records created before before.
	PurgeCalls(ctx context.Context, before time.Time) (int64, error)

	// Heartbeat records that instance id is alive at now.
	Heartbeat(ctx context.Context, id string, now time.Time) error
	// InstanceAlive reports whether id has beaten since cutoff.
	InstanceAlive(ctx context.Context, id string, cutoff time.Time) (bool, error)
	// ClaimSession gives owner the right to act on a session (reap, clean
	// up, resolve) until until. It fails (false) while another owner's
	// claim runs.
	ClaimSession(ctx context.Context, id, owner string, now, until time.Time) (bool, error)
	// TakeSession moves a session's claim from an owner known to be dead to
	// owner, until until; it is false when the claim is no longer from's.
	TakeSession(ctx context.Context, id, from, owner string, until time.Time) (bool, error)

	// Meta returns the value stored under key, storing def first when the
	// key has none (the first writer wins). It keeps facts of the whole
	// deployment, such as its id.
	Meta(ctx context.Context, key, def string) (string, error)
}
