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
