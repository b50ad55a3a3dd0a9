package docker

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

// requireRunsc makes a test that needs computers under gVisor with the
// engine's checkpoints fail instead of skip (make test-runsc sets it).
const requireRunsc = "BERTH_REQUIRE_RUNSC"

// suspendable returns a provider whose computers can be suspended: under
// the runtime SANDBOX_RUNTIME names, or runsc when the engine lists it.
func suspendable(t *testing.T, opts Options) *Docker {
	t.Helper()
	ctx := testContext(t, time.Minute)
	opts.Runtime = os.Getenv(SettingRuntime)
	d := newTestDocker(t, ctx, opts)
	if err := d.CanSuspend(ctx); err != nil {
		testkit.Missing(t, requireRunsc, err.Error(), "make test-runsc (dockerd --experimental, runsc registered)")
	}
	return d
}

// TestCanSuspendRefuses: an engine that cannot checkpoint computers says
// why, naming the runtime or the engine's setting to change.
func TestCanSuspendRefuses(t *testing.T) {
	ctx := testContext(t, time.Minute)
	d := newTestDocker(t, ctx, Options{})
	rt, err := d.Runtime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = d.CanSuspend(ctx)
	switch {
	case !strings.HasPrefix(rt.Name, DetectedRuntime):
		if !errors.Is(err, ErrNoCheckpoints) || !strings.Contains(err.Error(), "computers run under "+rt.Name) || !strings.Contains(err.Error(), "gVisor") {
			t.Fatalf("CanSuspend under %s = %v; want ErrNoCheckpoints naming the runtime and gVisor", rt.Name, err)
		}
		err = d.Suspend(ctx, ContainerPrefix+"test-none")
		if !errors.Is(err, ErrNoCheckpoints) {
			t.Fatalf("Suspend under %s = %v; want ErrNoCheckpoints", rt.Name, err)
		}
	case !rt.Checkpoints:
		if !errors.Is(err, ErrNoCheckpoints) || !strings.Contains(err.Error(), "--experimental") {
			t.Fatalf("CanSuspend without checkpoints = %v; want ErrNoCheckpoints naming --experimental", err)
		}
	default:
		if err != nil {
			t.Fatalf("CanSuspend under %s with checkpoints: %v", rt.Name, err)
		}
	}
}

// TestSuspendResume suspends a computer with a process counting in its
// memory-backed /tmp and resumes it: the count goes on from where it was
// (so /tmp, which lives in the sandbox's memory, was kept, and the same
// process, by its pid, goes on writing it), the computer does not run
// while suspended, the computer is reached at its address, and a
// second suspend and resume work as the first.
func TestSuspendResume(t *testing.T) {
	d := suspendable(t, Options{})
	ctx := testContext(t, 4*time.Minute)
	spec := testSpec(t)
	// The counter is a child of the computer's first process, as
	// computerd's are: gVisor does not restore what a docker exec started.
	spec.Env["BERTH_TEST_COUNTER"] = "1"
	m := create(t, ctx, d, spec)
	count := func() int {
		t.Helper()
		var n int
		testkit.Eventually(t, 10*time.Second, "the counter writes /tmp/count", func() bool {
			out, code := run(t, ctx, d, m.ID, "cat /tmp/count")
			var err error
			n, err = strconv.Atoi(strings.TrimSpace(out))
			return code == 0 && err == nil
		})
		return n
	}
	pid := func() string { return mustRun(t, ctx, d, m.ID, "cat /tmp/pid") }
	for round := range 2 {
		before, p := count(), pid()
		if err := d.Suspend(ctx, m.ID); err != nil {
			t.Fatalf("round %d: Suspend: %v", round, err)
		}
		ins, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
		if err != nil || ins.Container.State.Running {
			t.Fatalf("round %d: after Suspend the container runs (inspect err %v)", round, err)
		}
		if err := d.Suspend(ctx, m.ID); err != nil {
			t.Fatalf("round %d: a second Suspend: %v", round, err)
		}
		got, err := d.Resume(ctx, m.ID)
		if err != nil {
			t.Fatalf("round %d: Resume: %v", round, err)
		}
		if got.ID != m.ID || got.Endpoint != m.Endpoint {
			t.Fatalf("round %d: Resume = %+v, want machine %s at %s", round, got, m.ID, m.Endpoint)
		}
		// Without its memory the computer's /tmp would be empty; a counter
		// started afresh would be back near 1.
		after := count()
		if after < before {
			t.Errorf("round %d: counter %d after resume, %d before suspend: want it to go on from where it was", round, after, before)
		}
		if q := pid(); q != p {
			t.Errorf("round %d: counting shell pid %s after resume, %s before", round, q, p)
		}
		testkit.Eventually(t, 10*time.Second, "the counter goes on after resume", func() bool { return count() > after })
	}
	if _, err := d.Resume(ctx, m.ID); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Resume of a running computer = %v, want ErrNotFound", err)
	}
	// A computer made on an image that is no longer configured wakes on
	// the current one instead.
	if err := d.Suspend(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	moved := suspendable(t, Options{HeadlessImage: poolImage, DesktopImage: poolImage})
	if _, err := moved.Resume(ctx, m.ID); !errors.Is(err, providers.ErrNotFound) || !strings.Contains(err.Error(), "no longer configured") {
		t.Errorf("Resume after the image moved on = %v, want ErrNotFound saying so", err)
	}
	if _, err := d.Resume(ctx, ContainerPrefix+"test-gone"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Resume of a computer that is gone = %v, want ErrNotFound", err)
	}
}

// TestSuspendResumeHeld suspends a computer in a network holder's
// namespace (NETWORK_POOL): its computerd answers again at the same
// address once resumed.
func TestSuspendResumeHeld(t *testing.T) {
	for _, pool := range []int{0, 1} {
		t.Run(strconv.Itoa(pool), func(t *testing.T) { suspendResumeHeld(t, pool) })
	}
}

func suspendResumeHeld(t *testing.T, pool int) {
	d := suspendable(t, Options{NetworkPool: pool, HeadlessImage: poolImage})
	ctx := testContext(t, 4*time.Minute)
	m := create(t, ctx, d, testSpec(t))
	health := func(limit time.Duration) error {
		hctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		return computerd.NewClient(m.Endpoint, "").WaitHealthy(hctx)
	}
	if err := health(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.Suspend(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if err := health(500 * time.Millisecond); err == nil {
		t.Fatal("computerd answers while its computer is suspended")
	}
	got, err := d.Resume(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Endpoint != m.Endpoint {
		t.Errorf("resumed at %s, created at %s", got.Endpoint, m.Endpoint)
	}
	if err := health(30 * time.Second); err != nil {
		t.Fatalf("after resume: %v", err)
	}
}

// TestCollectorKeepsSuspended: a suspended computer past its expiry label
// is kept, with its network, its home and its network holder, for
// MaxSuspend; then it goes.
func TestCollectorKeepsSuspended(t *testing.T) {
	clk := clock.NewFake(time.Now())
	d := suspendable(t, Options{Grace: 5 * time.Second, Clock: clk})
	held := suspendable(t, Options{Grace: 5 * time.Second, Clock: clk, NetworkPool: 1, HeadlessImage: poolImage})
	ctx := testContext(t, 4*time.Minute)
	own, inHolder := testSpec(t), testSpec(t)
	for _, c := range []struct {
		d    *Docker
		spec *providers.Spec
	}{{d, &own}, {held, &inHolder}} {
		c.spec.Deployment = "suspend-" + randomID(t)
		c.spec.Lease = time.Minute
		m := create(t, ctx, c.d, *c.spec)
		if err := c.d.Suspend(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	holder := func() error {
		_, err := d.cli.ContainerInspect(ctx, HolderPrefix+inHolder.ComputerID, client.ContainerInspectOptions{})
		return err
	}
	gc, err := NewCollector(d.opts.Host, clk, d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	gc.deployments = map[string]bool{own.Deployment: true, inHolder.Deployment: true}
	clk.Advance(time.Hour)
	if n, err := gc.Collect(ctx); err != nil {
		t.Fatalf("collect: removed %+v, err %v", n, err)
	}
	// Its container, network and home; in a holder's network, its
	// container and home.
	for id, want := range map[string]int{own.ComputerID: 3, inHolder.ComputerID: 2} {
		if c := countOf(t, ctx, d, id); c != want {
			t.Errorf("past its label, suspended: %d of the %d resources of %s left", c, want, id)
		}
	}
	if err := holder(); err != nil {
		t.Errorf("past its label, suspended: the network holder: %v", err)
	}
	clk.Advance(MaxSuspend)
	if _, err := gc.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{own.ComputerID, inHolder.ComputerID} {
		if c := countOf(t, ctx, d, id); c != 0 {
			t.Errorf("%d resources of %s, suspended longer than MaxSuspend, are left", c, id)
		}
	}
	if err := holder(); err == nil {
		t.Errorf("the network holder of a computer suspended longer than MaxSuspend is left")
	}
}
