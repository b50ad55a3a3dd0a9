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
	// MaxCreators is the most creates a pool runs at once. A pool starts
	// at Creators and widens by one after each create that took at most
	// 1.5 times the fastest of the last recentCreates; a create that took
	// more than twice that halves it (at least one). So a pool refills as
	// many at once as the engine sustains, and backs off when the engine
	// slows, as when it is busy starting and running computers.
	MaxCreators = 8
	// recentCreates is how many create times the fastest is taken from.
	recentCreates = 32
)

// demand is what a pool remembers of its claims and creates; guarded by
// the pool's lock.
type demand struct {
	claims     []time.Time   // claim times, oldest first, within DemandWindow
	createTook time.Duration // running mean of successful creates (0: none yet)
	recent     []time.Duration
	width      int // creates at once now; 0 is Creators
}

func (d *demand) claimed(now time.Time) {
	if len(d.claims) == maxClaimsKept {
		d.claims = slices.Delete(d.claims, 0, 1)
	}
	d.claims = append(d.claims, now)
}

func (d *demand) created(took time.Duration) {
	d.widen(took)
	if d.createTook == 0 {
		d.createTook = took
		return
	}
	d.createTook = time.Duration(createWeight*float64(took) + (1-createWeight)*float64(d.createTook))
}

// widen moves the number of creates at once after a create that took
// took (see MaxCreators).
func (d *demand) widen(took time.Duration) {
	fastest := took
	for _, t := range d.recent {
		fastest = min(fastest, t)
	}
	fastest = max(fastest, time.Millisecond)
	if len(d.recent) == recentCreates {
		d.recent = slices.Delete(d.recent, 0, 1)
	}
	d.recent = append(d.recent, took)
	w := d.creators()
	switch {
	case took > 2*fastest:
		w = max(w/2, 1)
	case 2*took <= 3*fastest:
		w = min(w+1, MaxCreators)
	}
	d.width = w
}

// creators is how many creates may run at once now.
func (d *demand) creators() int {
	if d.width == 0 {
		return Creators
	}
	return d.width
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

// Creators is how many creates the pool runs at once now (MaxCreators).
func (p *Pool[M]) Creators() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.demand.creators()
}

// CreateTook is the running mean of the pool's successful creates, 0
// before the first.
func (p *Pool[M]) CreateTook() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.demand.createTook
}
