package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/supervisortest"
)

// TestHeartbeatWhileReapIsSlow: a reaper pass held up by a destroy that
// does not return (an engine under load) keeps this instance's heartbeat
// going, so other supervisors sharing the store do not take its cleanups
// over as those of a dead instance and do them twice.
func TestHeartbeatWhileReapIsSlow(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := supervisortest.Start(t, supervisortest.Options{Configure: func(c *supervisor.Config) { c.Clock = clk }})
	lease, daily := supervisor.MinLeaseSeconds, 3600
	s.Agent(t, "slow", "", &supervisor.ConnectRequest{Provider: fake.ID, LeaseSeconds: &lease, DailySeconds: &daily})
	ctx := testkit.Context(t)
	if _, err := s.Service.Start(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	s.Fake.SetFaults(fake.Faults{DestroyGate: gate})
	clk.Advance(supervisor.MinLeaseSeconds*time.Second + time.Second)

	rctx, cancel := context.WithCancel(ctx)
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		s.Service.RunReaper(rctx, time.Second)
	}()
	defer func() {
		close(gate)
		cancel()
		<-reaped
	}()
	testkit.Eventually(t, 10*time.Second, "the expired session's destroy held", func() bool { _, d := s.Fake.Counts(); return d > 0 })

	// Three times the heartbeat's lifetime, a step at a time, while the
	// destroy is still held: the instance stays alive all along.
	for moved := time.Duration(0); moved < 3*supervisor.InstanceTTL; moved += supervisor.InstanceTTL / 4 {
		testkit.Eventually(t, 10*time.Second, "the heartbeat waiting for its next beat", func() bool { return clk.Waiters() > 0 })
		clk.Advance(supervisor.InstanceTTL / 4)
		testkit.Eventually(t, 10*time.Second, "this instance alive "+(moved+supervisor.InstanceTTL/4).String()+" after the reaper's pass began", func() bool {
			alive, err := s.Store.InstanceAlive(ctx, s.Service.Instance(), clk.Now().Add(-supervisor.InstanceTTL))
			return err == nil && alive
		})
	}
	if _, d := s.Fake.Counts(); d != 1 {
		t.Fatalf("%d destroys while the first was held, want 1", d)
	}
}
