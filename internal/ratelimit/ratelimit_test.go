package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTake: a bucket gives its burst at once, then one token per 1/rate
// seconds, and says how long until the next; names have buckets of their
// own; a rate of 0 is no limit; full idle buckets go when the limiter is
// full.
func TestTake(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(2, 3)
	l.now = func() time.Time { return now }
	for i := range 3 {
		if ok, _ := l.Take("a"); !ok {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	if ok, wait := l.Take("a"); ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst: %v, wait %v; want refused, 500ms", ok, wait)
	}
	if ok, _ := l.Take("b"); !ok {
		t.Fatal("another name's bucket was empty")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.Take("a"); !ok {
		t.Fatal("a token did not come back after 1/rate")
	}
	if ok, _ := New(0, 1).Take("x"); !ok {
		t.Fatal("rate 0 limited")
	}
	full := New(1, 1)
	full.now = func() time.Time { return now }
	for i := range maxBuckets + 5 {
		full.Take(fmt.Sprint(i))
	}
	now = now.Add(time.Hour)
	full.Take("late")
	if n := len(full.buckets); n > maxBuckets {
		t.Errorf("%d buckets kept, want at most %d", n, maxBuckets)
	}
}
