package relayclient

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// Backoff yields jittered, exponentially growing delays between reconnect
// attempts, and starts over once a connection has stayed up for a stable
// period. The zero value is not usable; see NewBackoff.
type Backoff struct {
	Min    time.Duration // first delay
	Max    time.Duration // cap
	Jitter float64       // each delay is scaled by a factor in [1-Jitter, 1+Jitter]
	Stable time.Duration // a connection up this long resets the backoff
	Clock  clock.Clock
	// Rand returns a number in [0, 1); nil uses math/rand/v2.
	Rand func() float64

	next    time.Duration
	upSince time.Time
}

// NewBackoff returns the default reconnect backoff: 500 ms doubling to 30 s,
// ±20% jitter, reset after 60 s connected.
func NewBackoff(c clock.Clock) *Backoff {
	if c == nil {
		c = clock.Real{}
	}
	return &Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2, Stable: time.Minute, Clock: c}
}

// Connected records that a connection was established now.
func (b *Backoff) Connected() { b.upSince = b.Clock.Now() }

// Next returns the delay before the next attempt. If the last connection
// lasted at least Stable, the sequence starts over.
func (b *Backoff) Next() time.Duration {
	if !b.upSince.IsZero() {
		if b.Clock.Now().Sub(b.upSince) >= b.Stable {
			b.next = 0
		}
		b.upSince = time.Time{}
	}
	if b.next <= 0 {
		b.next = b.Min
	}
	d := b.next
	b.next *= 2
	if b.next > b.Max {
		b.next = b.Max
	}
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	return time.Duration(float64(d) * (1 + b.Jitter*(2*r()-1)))
}

// Wait sleeps on the clock for the next delay, or until ctx ends.
func (b *Backoff) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.Clock.After(b.Next()):
		return nil
	}
}
