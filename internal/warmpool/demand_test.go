package warmpool

import (
	"fmt"
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

// TestWiden: a pool runs Creators creates at once, one more after each
// create about as fast as the fastest of the recent ones, up to
// MaxCreators, and half as many after one that took more than twice as
// long.
func TestWiden(t *testing.T) {
	var d demand
	want := func(step string, w int) {
		t.Helper()
		if got := d.creators(); got != w {
			t.Fatalf("%s: %d creates at once, want %d", step, got, w)
		}
	}
	want("new", Creators)
	for i := range 3 {
		d.created(time.Second)
		want(fmt.Sprintf("fast create %d", i+1), Creators+i+1)
	}
	d.created(3 * time.Second)
	want("a create three times as slow", (Creators+3)/2)
	d.created(1400 * time.Millisecond)
	want("a create 1.4 times the fastest", (Creators+3)/2+1)
	d.created(1800 * time.Millisecond)
	want("a create 1.8 times the fastest", (Creators+3)/2+1)
	for range 20 {
		d.created(time.Second)
	}
	want("many fast creates", MaxCreators)
	for range 5 {
		d.created(10 * time.Second)
	}
	want("slow creates", 1)
}
