package apiserver_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// retryReconcile runs RetryReconcile on the providers the start pass left
// unfinished, moving the fake clock a second at a time (at most steps
// times) until done says so; it returns the seconds moved. The retries
// end with ctx, which the caller may cancel.
func retryReconcile(t *testing.T, e *env, ctx context.Context, steps int, done func() bool) int {
	t.Helper()
	rep, err := e.svc.Reconcile(ctx)
	if err == nil || !slices.Equal(rep.Unfinished, []string{"fake"}) {
		t.Fatalf("start pass with a failing list: err %v, unfinished %v", err, rep.Unfinished)
	}
	ended := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(ended)
		e.svc.RetryReconcile(rctx, rep.Unfinished)
	}()
	moved := 0
	for ; moved < steps && !done(); moved++ {
		// The retries wait on the clock between passes: move it only
		// then, so that each wait is measured whole.
		if !testkit.Poll(10*time.Second, func() bool { return e.clock.Waiters() != 0 || done() }) {
			t.Fatalf("after %d s: the retries wait for no timer", moved)
		}
		if done() {
			break
		}
		e.clock.Advance(time.Second)
	}
	cancel()
	<-ended
	return moved
}

// A provider that cannot be listed at start is reconciled again, with
// growing waits, until a pass finishes: its leftover is removed then, and
// the machine of a running session is kept.
func TestRetryReconcileFinishes(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e.connect("a1", 900, 7200)
	var live supervisor.SessionView
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &live)
	dep, err := e.svc.Deployment(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The machine of a session that ended while no supervisor ran.
	if _, err := e.fake.Create(ctx, providers.Spec{
		ComputerID: "c-left", SessionID: "s-ended", AttemptID: "a-left",
		Deployment: dep, AgentID: "a1", Image: providers.ImageHeadless,
		TokenHash: strings.Repeat("0", 64),
	}); err != nil {
		t.Fatal(err)
	}

	// The start pass and the next two fail; the third retry, after
	// 2 + 4 + 8 s, finishes.
	e.fake.SetFaults(fake.Faults{FailLists: 3})
	destroyed := func() bool { _, d := e.fake.Counts(); return d > 0 }
	moved := retryReconcile(t, e, ctx, 120, destroyed)
	if !destroyed() {
		t.Fatalf("leftover still there after %d s of retries", moved)
	}
	if moved < 14 {
		t.Errorf("leftover removed after %d s; the third retry comes 14 s after the start pass", moved)
	}
	if _, d := e.fake.Counts(); d != 1 {
		t.Errorf("%d machines destroyed, want the leftover alone", d)
	}
	x, err := e.st.GetSession(ctx, live.ID)
	if err != nil || x.State != store.StateRunning {
		t.Fatalf("live session after the retries: %+v %v", x, err)
	}
	var r supervisor.ExecResult
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "echo kept"}, 200, &r)
	if r.Stdout != "kept\n" {
		t.Fatalf("exec on the kept machine: %+v", r)
	}
	if n := strings.Count(e.logs.String(), "reconcile: trying again"); n != 2 {
		t.Errorf("%d retries logged as failed, want 2", n)
	}
}

// A provider that never answers is tried on and on, at growing intervals,
// with one warning, until the retries' context ends.
func TestRetryReconcileKeepsTrying(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e.fake.SetFaults(fake.Faults{FailLists: 1 << 20})
	// 300 s hold retries at 2, 6, 14, 30, 62, 126 and 254 s.
	moved := retryReconcile(t, e, ctx, 300, func() bool { return false })
	if moved != 300 {
		t.Fatalf("moved %d s", moved)
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "reconcile: trying again"); n != 7 {
		t.Errorf("%d failed retries logged in 300 s, want 7 (waits 2, 4, 8, ... s)", n)
	}
	if n := strings.Count(logs, "a provider keeps failing"); n != 1 {
		t.Errorf("warned %d times, want once", n)
	}
}
