package supervisortest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/berthdev/berth/supervisor/store"
)

// Joins is a store that counts the requests that found another one's work
// already under way: a start whose agent's session was live (Reserve
// answered store.ErrLive), and a call whose Idempotency-Key was already
// taken (BeginCall found its record). A test that holds a create
// (fake.Faults.CreateGate) lets it go on once the requests it sent have
// joined, instead of giving them a fixed time to arrive.
type Joins struct {
	store.Store
	n atomic.Int64
}

// CountJoins wraps st.
func CountJoins(st store.Store) *Joins { return &Joins{Store: st} }

// Reserve is the store's Reserve, counting the refusals for a live
// session.
func (j *Joins) Reserve(ctx context.Context, r store.Reservation) (store.Session, error) {
	x, err := j.Store.Reserve(ctx, r)
	if errors.Is(err, store.ErrLive) {
		j.n.Add(1)
	}
	return x, err
}

// BeginCall is the store's BeginCall, counting the calls that found their
// key's record.
func (j *Joins) BeginCall(ctx context.Context, c store.Call) (store.Call, bool, error) {
	got, created, err := j.Store.BeginCall(ctx, c)
	if err == nil && !created {
		j.n.Add(1)
	}
	return got, created, err
}

// Count is how many requests have joined another's work so far.
func (j *Joins) Count() int { return int(j.n.Load()) }
