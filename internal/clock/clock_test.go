package clock

import (
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	start := time.Date(2026, 1, 1, 23, 59, 0, 0, time.UTC)
	f := NewFake(start)
	ch := f.After(time.Minute)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	f.Advance(59 * time.Second)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Second)
	select {
	case got := <-ch:
		if !got.Equal(start.Add(time.Minute)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("did not fire")
	}
	f.Set(start) // backwards: ignored
	if !f.Now().Equal(start.Add(time.Minute)) {
		t.Fatal("clock moved backwards")
	}
}

func TestFakeWaiters(t *testing.T) {
	f := NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if n := f.Waiters(); n != 0 {
		t.Fatalf("new clock: %d waiters", n)
	}
	f.After(time.Second)
	f.After(time.Minute)
	f.After(0) // fires at once: never waits
	if n := f.Waiters(); n != 2 {
		t.Fatalf("%d waiters, want 2", n)
	}
	f.Advance(time.Second)
	if n := f.Waiters(); n != 1 {
		t.Fatalf("after the first fired: %d waiters, want 1", n)
	}
}
