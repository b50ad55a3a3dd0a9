package mcpserver

import (
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// realSupervisor serves a real supervisor over the fake provider, with
// testAgent connected as conn says, until the test ends.
func realSupervisor(t *testing.T, conn supervisor.ConnectRequest) *supervisortest.Supervisor {
	t.Helper()
	s := supervisortest.Start(t, supervisortest.Options{Token: testToken, Logger: testLogger(t)})
	s.Agent(t, testAgent, "", &conn)
	return s
}

// TestStartFailedCreateIsToolError: computer_start whose create failed, or
// that waited on another start whose create failed, is an error result
// with the supervisor's code, never a stopped session.
func TestStartFailedCreateIsToolError(t *testing.T) {
	var joins *supervisortest.Joins
	sup := supervisortest.Start(t, supervisortest.Options{Token: testToken, Logger: testLogger(t), Configure: func(c *supervisor.Config) {
		joins = supervisortest.CountJoins(c.Store)
		c.Store = joins
	}})
	sup.Agent(t, testAgent, "", &supervisor.ConnectRequest{})
	ctx := testContext(t)
	c, err := api.New(sup.URL, testToken, api.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cs := connectInMemory(t, New(c, testAgent, WithLogger(testLogger(t))))

	// The create of this computer_start fails: 503, retried with its key.
	sup.Fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: providers.ErrCapacity})
	res := callTool(t, cs, ToolStart, nil)
	want := "computer_start failed: the provider is out of quota or capacity (code provider_unavailable, HTTP 503)"
	if !res.IsError || text(res) != want {
		t.Errorf("start = %v %q, want an error %q", res.IsError, text(res), want)
	}

	// This computer_start waits on a REST start whose create fails: the
	// create goes on once the computer_start has found the session live.
	gate := make(chan struct{})
	sup.Fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: providers.ErrBadImage, CreateGate: gate})
	first := make(chan error, 1)
	go func() {
		_, err := c.Start(ctx, testAgent)
		first <- err
	}()
	for {
		if x, err := sup.Store.LiveSession(ctx, testAgent); err == nil && x.State == store.StateStarting {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the first start never began its create")
		case <-time.After(2 * time.Millisecond):
		}
	}
	joined := joins.Count()
	released := make(chan struct{})
	go func() {
		defer close(released)
		defer close(gate)
		testkit.PollContext(ctx, time.Minute, func() bool { return joins.Count() > joined })
	}()
	res = callTool(t, cs, ToolStart, nil)
	<-released
	if !res.IsError || !strings.Contains(text(res), "(code provider_error, HTTP 502)") || !strings.Contains(text(res), "computer image missing") {
		t.Errorf("start that waited = %v %q, want the failed create's error", res.IsError, text(res))
	}
	if err := <-first; err == nil || !strings.Contains(err.Error(), "provider_error") {
		t.Errorf("the first start: %v", err)
	}
	if n, _ := sup.Fake.Counts(); n != 2 {
		t.Errorf("creates = %d, want 2", n)
	}

	// Once the provider works, computer_start starts the computer.
	sup.Fake.SetFaults(fake.Faults{})
	res = callTool(t, cs, ToolStart, nil)
	var s api.Session
	structured(t, res, &s)
	if res.IsError || s.State != api.StateRunning {
		t.Fatalf("start after the failures = %v %q", res.IsError, text(res))
	}
}
