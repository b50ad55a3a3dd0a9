package warmpool

import (
	"testing"
	"time"
)

// TestPeak: the size is the most claims within one refill (the mean
// create time, at least Interval), over the claims of the last
// DemandWindow.
func TestPeak(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d demand
	for i := range 6 { // one start every half second
		d.claimed(t0.Add(time.Duration(i) * 500 * time.Millisecond))
	}
	now := t0.Add(3 * time.Second)
	if got := d.peak(now); got != 3 {
		t.Errorf("no create measured (a refill of Interval, 1 s): peak %d, want 3", got)
	}
	d.created(3 * time.Second)
	if got := d.peak(now); got != 6 {
		t.Errorf("creates of 3 s: peak %d, want 6", got)
	}
	d.created(1 * time.Second) // the mean moves a quarter of the way
	if want := 2500 * time.Millisecond; d.createTook != want {
		t.Errorf("mean create time %v, want %v", d.createTook, want)
	}
	if got := d.peak(t0.Add(DemandWindow + 2*time.Second)); got != 2 {
		t.Errorf("with the first claims aged out: peak %d, want 2", got)
	}
	if got := d.peak(t0.Add(DemandWindow + time.Hour)); got != 0 || len(d.claims) != 0 {
		t.Errorf("all aged out: peak %d, %d claims kept", got, len(d.claims))
	}
	for i := range maxClaimsKept + 10 {
		d.claimed(t0.Add(time.Duration(i)))
	}
	if len(d.claims) != maxClaimsKept {
		t.Errorf("%d claims kept, want at most %d", len(d.claims), maxClaimsKept)
	}
}
