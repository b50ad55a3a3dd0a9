package testkit

import (
	"slices"
	"testing"
	"time"
)

// PairedRuns times x and y once each per benchmark iteration, taking turns
// at going first, so that a drift in the machine's speed falls on both.
func PairedRuns(b *testing.B, x, y func() time.Duration) (xs, ys []time.Duration) {
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			xs = append(xs, x())
			ys = append(ys, y())
		} else {
			ys = append(ys, y())
			xs = append(xs, x())
		}
	}
	return xs, ys
}

// PairRatio is the median of each pair's ratio xs[i]/ys[i], which a drift
// in the machine's speed over a run affects less than a ratio of medians.
func PairRatio(xs, ys []time.Duration) float64 {
	ratios := make([]float64, len(xs))
	for i := range xs {
		ratios[i] = float64(xs[i]) / float64(ys[i])
	}
	return Median(ratios)
}

// Median is the median of xs (the upper one of an even count), 0 for none.
func Median[T time.Duration | float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
