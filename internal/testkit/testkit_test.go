package testkit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

// fakeT records how the kit ends a test instead of ending it.
type fakeT struct {
	deadline time.Time
	cleanups []func()
	fatal    string
	skip     string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
}
func (f *fakeT) Skipf(format string, args ...any) { f.skip = fmt.Sprintf(format, args...) }
func (f *fakeT) Deadline() (time.Time, bool)      { return f.deadline, !f.deadline.IsZero() }

func (f *fakeT) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestContextEndsBeforeTheDeadline(t *testing.T) {
	ft := &fakeT{deadline: time.Now().Add(time.Minute)}
	ctx := Context(ft)
	dl, ok := ctx.Deadline()
	if !ok || !dl.Before(ft.deadline) || dl.Before(ft.deadline.Add(-margin-time.Second)) {
		t.Fatalf("deadline %v, want %v before %v", dl, margin, ft.deadline)
	}
	ft.cleanup()
	if ctx.Err() == nil {
		t.Fatal("the context outlived the test's cleanups")
	}
}

func TestContextNearTheDeadlineKeepsAQuarter(t *testing.T) {
	ft := &fakeT{deadline: time.Now().Add(4 * time.Second)}
	dl, _ := Context(ft).Deadline()
	if left := time.Until(dl); left < 2*time.Second || left > 3*time.Second {
		t.Fatalf("%v left of 4s, want about 3s", left)
	}
	ft.cleanup()
}

func TestContextWithoutDeadline(t *testing.T) {
	ft := &fakeT{}
	dl, ok := Context(ft).Deadline()
	if !ok || time.Until(dl) > DefaultTimeout || time.Until(dl) < DefaultTimeout-time.Minute {
		t.Fatalf("deadline in %v, want %v", time.Until(dl), DefaultTimeout)
	}
	dl, _ = ContextTimeout(ft, time.Second).Deadline()
	if time.Until(dl) > time.Second {
		t.Fatalf("ContextTimeout(1s) ends in %v", time.Until(dl))
	}
	ft.cleanup()
}

func TestEventually(t *testing.T) {
	var n atomic.Int32
	Eventually(t, 5*time.Second, "three checks", func() bool { return n.Add(1) == 3 })

	ft := &fakeT{}
	start := time.Now()
	Eventually(ft, 50*time.Millisecond, "the impossible", func() bool { return false })
	if took := time.Since(start); took < 50*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %v, want 50ms", took)
	}
	if !strings.Contains(ft.fatal, "the impossible") || !strings.Contains(ft.fatal, "50ms") {
		t.Fatalf("failure %q does not say what it waited for, and how long", ft.fatal)
	}
}

func TestEventuallyContext(t *testing.T) {
	var n atomic.Int32
	EventuallyContext(t, Context(t), "three checks", func() bool { return n.Add(1) == 3 })

	ft := &fakeT{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	EventuallyContext(ft, ctx, "the impossible", func() bool { return false })
	if !strings.Contains(ft.fatal, "the impossible") || !strings.Contains(ft.fatal, "deadline exceeded") {
		t.Fatalf("failure %q does not say what it waited for, and why it stopped", ft.fatal)
	}
}

func TestPoll(t *testing.T) {
	if !Poll(0, func() bool { return true }) {
		t.Fatal("a condition that holds at once did not count with no time to wait")
	}
	var n atomic.Int32
	if Poll(30*time.Millisecond, func() bool { n.Add(1); return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if n.Load() < 2 {
		t.Fatalf("checked %d times in 30ms", n.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if PollContext(ctx, time.Minute, func() bool { return false }) || time.Since(start) > time.Second {
		t.Fatal("PollContext did not give up with its context")
	}
}

func TestMissing(t *testing.T) {
	t.Setenv(NetnsEnv, "")
	ft := &fakeT{}
	Missing(ft, NetnsEnv, "no ip", "apt-get install -y iproute2")
	if ft.fatal != "" || !strings.Contains(ft.skip, "no ip; to run this test: apt-get install -y iproute2") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
	t.Setenv(NetnsEnv, "1")
	ft = &fakeT{}
	Missing(ft, NetnsEnv, "no ip", "apt-get install -y iproute2")
	if ft.skip != "" || !strings.Contains(ft.fatal, "BERTH_REQUIRE_NETNS=1") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
}

func TestRequireTools(t *testing.T) {
	t.Setenv(DockerEnv, "")
	ft := &fakeT{}
	RequireTools(ft, "apt-get install -y coreutils", "sh", "/bin/sh")
	if ft.skip != "" || ft.fatal != "" {
		t.Fatalf("present tools: skip %q, fatal %q", ft.skip, ft.fatal)
	}
	RequireTools(ft, "apt-get install -y nothing", "sh", "berth-no-such-tool", "/no/such/tool")
	if !strings.Contains(ft.skip, "berth-no-such-tool, /no/such/tool missing") {
		t.Fatalf("skip %q", ft.skip)
	}
	t.Setenv(DockerEnv, "1")
	ft = &fakeT{}
	RequireTools(ft, "apt-get install -y nothing", "berth-no-such-tool")
	if ft.fatal == "" {
		t.Fatal("a missing tool under BERTH_REQUIRE_DOCKER=1 did not fail")
	}
}

// TestRequireDockerWithoutEngine points the kit at a socket nobody serves.
func TestRequireDockerWithoutEngine(t *testing.T) {
	t.Setenv(socketEnv, "unix://"+t.TempDir()+"/none.sock")
	reset := func() { engineOnce = sync.Once{}; engineErr, engineMiss = nil, false }
	reset()
	t.Cleanup(reset)
	t.Setenv(DockerEnv, "")
	ft := &fakeT{}
	RequireDocker(ft, "berth/test:latest")
	if ft.fatal != "" || !strings.Contains(ft.skip, "no Docker engine at unix://") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
	t.Setenv(DockerEnv, "1")
	ft = &fakeT{}
	RequireDocker(ft)
	if ft.skip != "" || !strings.Contains(ft.fatal, "BERTH_REQUIRE_DOCKER=1") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
}

// TestRequireDockerImages runs against the real engine, where there is
// one: a missing image skips, or fails under BERTH_REQUIRE_DOCKER=1.
func TestRequireDockerImages(t *testing.T) {
	RequireDocker(t)
	t.Setenv(DockerEnv, "")
	ft := &fakeT{}
	RequireDocker(ft, "berth/no-such-image:never")
	if ft.fatal != "" || !strings.Contains(ft.skip, "image berth/no-such-image:never is missing") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
	t.Setenv(DockerEnv, "1")
	ft = &fakeT{}
	RequireDocker(ft, "berth/no-such-image:never")
	if !strings.Contains(ft.fatal, "BERTH_REQUIRE_DOCKER=1") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
}

// TestRequireDockerImageFound: an image the engine has passes the gate.
func TestRequireDockerImageFound(t *testing.T) {
	RequireDocker(t, "berth/test:latest")
	ft := &fakeT{}
	RequireDocker(ft, "berth/test:latest")
	if ft.skip != "" || ft.fatal != "" {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
}

// TestRequireDockerBrokenEngine: an engine that answers with an error
// fails the test, required or not, with the engine's message.
func TestRequireDockerBrokenEngine(t *testing.T) {
	sock := t.TempDir() + "/engine.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine is shutting down", http.StatusInternalServerError)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Setenv(socketEnv, "unix://"+sock)
	reset := func() { engineOnce = sync.Once{}; engineErr, engineMiss = nil, false }
	reset()
	t.Cleanup(reset)
	t.Setenv(DockerEnv, "")
	ft := &fakeT{}
	RequireDocker(ft)
	if ft.skip != "" || !strings.Contains(ft.fatal, "500") || !strings.Contains(ft.fatal, "engine is shutting down") {
		t.Fatalf("skip %q, fatal %q", ft.skip, ft.fatal)
	}
}

func TestLeakOptionsKeepExtras(t *testing.T) {
	if n := len(LeakOptions()); n != len(processGoroutines) {
		t.Fatalf("%d options, want the %d shared ones", n, len(processGoroutines))
	}
	if n := len(LeakOptions(nil, nil)); n != len(processGoroutines)+2 {
		t.Fatalf("%d options with two extras", n)
	}
	// A goroutine left running is seen, then gone once it ends.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); <-stop }()
	ft := &leakT{}
	VerifyNone(ft)
	if !ft.failed {
		t.Error("VerifyNone did not see a goroutine left running")
	}
	close(stop)
	<-done
	runtime.Gosched()
	VerifyNone(t)
}

type leakT struct{ failed bool }

func (l *leakT) Error(...any) { l.failed = true }

func TestMedianAndPairRatio(t *testing.T) {
	if got := Median([]time.Duration{3, 1, 2}); got != 2 {
		t.Errorf("Median(3,1,2) = %v, want 2", got)
	}
	if got := Median([]float64{}); got != 0 {
		t.Errorf("Median() = %v, want 0", got)
	}
	// Pairs 2/1, 6/2 and 4/4 have ratios 2, 3 and 1: their median is 2.
	if got := PairRatio([]time.Duration{2, 6, 4}, []time.Duration{1, 2, 4}); got != 2 {
		t.Errorf("PairRatio = %v, want 2", got)
	}
}

// TestFreePort: the port comes from below the ephemeral range, where no
// port-0 listener or outgoing connection takes one, and a server can
// bind it for TCP and UDP on every address.
func TestFreePort(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < freePortBase || p >= low {
			t.Fatalf("FreePort gave %d, want one in [%d, %d)", p, freePortBase, low)
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("listen on the port FreePort gave: %v", err)
		}
		u, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		if err != nil {
			l.Close()
			t.Fatalf("UDP on the port FreePort gave: %v", err)
		}
		if portFree(p) {
			t.Errorf("port %d is held, but portFree says it is free", p)
		}
		u.Close()
		l.Close()
	}
}
