package relayclient

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestBackoffGrowthCapJitterReset(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	fixed := 0.5 // no jitter
	b.Rand = func() float64 { return fixed }

	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("step %d: %v, want %v", i, got, w)
		}
	}

	// A short connection does not reset.
	b.Connected()
	clk.Advance(59 * time.Second)
	if got := b.Next(); got != 30*time.Second {
		t.Fatalf("after a short connection: %v", got)
	}
	// A stable one does.
	b.Connected()
	clk.Advance(60 * time.Second)
	if got := b.Next(); got != 500*time.Millisecond {
		t.Fatalf("after a stable connection: %v", got)
	}

	// Jitter bounds: the extremes of Rand give ±20%.
	b = NewBackoff(clk)
	b.Rand = func() float64 { return fixed }
	fixed = 0
	if got := b.Next(); got != 400*time.Millisecond {
		t.Fatalf("low jitter: %v", got)
	}
	fixed = 0.999999
	if got := b.Next(); got < 1199*time.Millisecond || got > 1200*time.Millisecond {
		t.Fatalf("high jitter: %v", got)
	}
	// Real randomness stays inside the bounds.
	b = NewBackoff(clk)
	for i := range 200 {
		base := min(500*time.Millisecond<<min(i, 6), 30*time.Second)
		got := b.Next()
		if got < base*8/10 || got > base*12/10 {
			t.Fatalf("step %d: %v outside ±20%% of %v", i, got, base)
		}
	}
}

func TestBackoffWaitUsesClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	b.Rand = func() float64 { return 0.5 }
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx) }()
	// Advance until the waiter is registered and fires; time moves only here.
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if el := clk.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); el < 500*time.Millisecond {
				t.Fatalf("woke after %v of clock time", el)
			}
			goto cancelled
		case <-ctx.Done():
			t.Fatal("Wait never returned")
		case <-time.After(time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
cancelled:
	wctx, wcancel := context.WithCancel(ctx)
	go func() { done <- b.Wait(wctx) }()
	wcancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Wait after cancel: %v", err)
	}
}
