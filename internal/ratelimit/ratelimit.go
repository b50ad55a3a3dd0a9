// Package ratelimit is a set of token buckets by name: requests per key,
// attempts per client address.
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// maxBuckets bounds a limiter's memory; full, idle buckets are dropped
// when it is reached.
const maxBuckets = 10000

// Limiter is a set of token buckets by name. Buckets live in this
// process: each supervisor sharing a store limits on its own.
type Limiter struct {
	mu      sync.Mutex
	rate    float64 // tokens a second; 0 or less: no limit
	burst   float64
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a limiter of rate tokens a second per name, in bursts of
// burst; a rate of 0 or less is no limit.
func New(rate float64, burst int) *Limiter {
	return &Limiter{rate: rate, burst: float64(max(burst, 1)), now: time.Now, buckets: map[string]*bucket{}}
}

// Take takes a token of name's bucket; when there is none it returns how
// long until one comes.
func (l *Limiter) Take(name string) (ok bool, wait time.Duration) {
	if l == nil || l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[name]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[name] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

func (l *Limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// Rate is the tokens a second of each bucket.
func (l *Limiter) Rate() float64 { return l.rate }

// Burst is how many tokens a bucket holds at most.
func (l *Limiter) Burst() float64 { return l.burst }
