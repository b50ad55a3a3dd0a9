package warmpool

import (
	"slices"
	"time"
)

// Demand-following sizes. A pool whose user sets a range (WARM_POOL_MIN
// to WARM_POOL_MAX) holds as many members as the largest burst of claims
// it has seen in the last DemandWindow would have taken within one
// refill: the peak start rate times the time a create takes. A burst
// like the last one then finds the pool full, and a pool whose claims
// have aged out of the window shrinks back to its minimum.
const (
	// DemandWindow is how long a claim counts toward the pool's size.
	DemandWindow = 10 * time.Minute
	// maxClaimsKept bounds the claims remembered; a pool busier than
	// this within DemandWindow is sized by the newest ones.
	maxClaimsKept = 4096
	// createWeight is the weight of the newest create in the running
	// mean of create durations (an exponential moving average).
	createWeight = 0.25
)

// demand is what a pool remembers of its claims and creates; guarded by
// the pool's lock.
type demand struct {
	claims     []time.Time   // claim times, oldest first, within DemandWindow
	createTook time.Duration // running mean of successful creates (0: none yet)
}

func (d *demand) claimed(now time.Time) {
	if len(d.claims) == maxClaimsKept {
		d.claims = slices.Delete(d.claims, 0, 1)
	}
	d.claims = append(d.claims, now)
}

func (d *demand) created(took time.Duration) {
	if d.createTook == 0 {
		d.createTook = took
		return
	}
	d.createTook = time.Duration(createWeight*float64(took) + (1-createWeight)*float64(d.createTook))
}

// peak is the largest number of claims within one refill (the mean create
// time, at least one pass's Interval) in the last DemandWindow.
func (d *demand) peak(now time.Time) int {
	cut := 0
	for cut < len(d.claims) && now.Sub(d.claims[cut]) > DemandWindow {
		cut++
	}
	d.claims = slices.Delete(d.claims, 0, cut)
	span := max(d.createTook, Interval)
	best, j := 0, 0
	for i := range d.claims {
		for d.claims[i].Sub(d.claims[j]) > span {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Size returns how many members a pool sized to its demand holds now,
// within lo..hi: the peak of its claims within one refill. With lo equal
// to hi it is that fixed size. Call it from Config.Target, where the
// pool's lock is held.
func (p *Pool[M]) Size(now time.Time, lo, hi int) int {
	if hi <= lo {
		return max(lo, 0)
	}
	return min(max(p.demand.peak(now), lo), hi)
}

// CreateTook is the running mean of the pool's successful creates, 0
// before the first.
func (p *Pool[M]) CreateTook() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.demand.createTook
}
