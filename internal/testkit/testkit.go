// Package testkit is the scaffolding every package's tests share: a
// context bounded by the test's deadline, bounded polling for a condition,
// the gates that skip a test when Docker, PostgreSQL, a network namespace,
// a CPU cgroup or a tool is missing (or fail it where CI requires them),
// the test binary started again in a role of its own, held to a share of
// the CPU when a benchmark needs it, and the goleak set-up for TestMain.
// Only tests import it.
package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds Context when the test has no deadline (go test
// -timeout 0).
const DefaultTimeout = 5 * time.Minute

// margin is what Context keeps back from the test's deadline, so that a
// test that runs out of time fails with its own message (and its cleanups
// run) before the test binary panics.
const margin = 5 * time.Second

// Eventually and Poll check their condition first after Interval, then at
// intervals that double up to MaxInterval: a condition that comes true
// soon is seen soon, and a slow one (a docker command, say) is not run
// in a tight loop.
const (
	Interval    = 10 * time.Millisecond
	MaxInterval = 100 * time.Millisecond
)

// next is the interval after d.
func next(d time.Duration) time.Duration { return min(2*d, MaxInterval) }

// TB is the part of testing.TB the kit needs; *testing.T, *testing.B and
// *testing.F have it.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

type deadliner interface{ Deadline() (time.Time, bool) }

// Context returns a context that ends a little before the test's deadline
// (or DefaultTimeout from now when it has none) and is cancelled when the
// test's cleanups run, after the cleanups registered later than this call.
func Context(t TB) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), deadline(t, DefaultTimeout))
	t.Cleanup(cancel)
	return ctx
}

// ContextTimeout is Context bounded further to d from now.
func ContextTimeout(t TB, d time.Duration) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), deadline(t, d))
	t.Cleanup(cancel)
	return ctx
}

// deadline is now+limit, or the test's deadline less a margin when that
// comes first.
func deadline(t TB, limit time.Duration) time.Time {
	now := time.Now()
	end := now.Add(limit)
	if d, ok := t.(deadliner); ok {
		if dl, ok := d.Deadline(); ok {
			m := margin
			if left := dl.Sub(now); left < 4*margin {
				m = left / 4
			}
			if dl = dl.Add(-m); dl.Before(end) {
				end = dl
			}
		}
	}
	return end
}

// Eventually checks cond until it holds, and fails the
// test, naming what it waited for, when timeout passes first.
func Eventually(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// EventuallyContext checks cond until it holds, and fails
// the test, naming what it waited for, when ctx ends first.
func EventuallyContext(t TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for d := Interval; !cond(); d = next(d) {
		select {
		case <-ctx.Done():
			if cond() {
				return
			}
			t.Fatalf("gave up after %v (%v) waiting for %s", time.Since(start).Round(time.Millisecond), context.Cause(ctx), what)
			return
		case <-time.After(d):
		}
	}
}

// Poll checks cond until it holds or timeout passes, and
// reports whether it held. cond is always checked at least once, and once
// more at the end.
func Poll(timeout time.Duration, cond func() bool) bool {
	return PollContext(context.Background(), timeout, cond)
}

// PollContext is Poll that also gives up when ctx ends.
func PollContext(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for d := Interval; ; d = next(d) {
		if cond() {
			return true
		}
		left := time.Until(end)
		if left <= 0 {
			return false
		}
		timer := time.NewTimer(min(d, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return cond()
		case <-timer.C:
		}
	}
}

// FreePort returns a port that was free a moment ago for TCP and UDP on
// every address, for a server process the test starts and cannot give
// port 0. It comes from below the kernel's range of ephemeral ports
// (net.ipv4.ip_local_port_range), from which neither a listener on port
// 0 nor an outgoing connection takes one, so that only another such
// choice can take it before the server binds it.
func FreePort() (int, error) {
	low := ephemeralLow()
	if low-freePortBase < 1000 {
		return 0, fmt.Errorf("ephemeral ports begin at %d: no room below it above %d", low, freePortBase)
	}
	for range 100 {
		p := freePortBase + rand.IntN(low-freePortBase)
		if portFree(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port found between %d and %d in 100 tries", freePortBase, low)
}

// freePortBase is the lowest port FreePort gives, above the well-known and
// the commonly registered ones.
const freePortBase = 20000

// ephemeralLow returns the first port of the kernel's ephemeral range,
// Linux's default of 32768 where it cannot be read.
func ephemeralLow() int {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 0 && n <= 65535 {
			return n
		}
	}
	return 32768
}

func portFree(p int) bool {
	addr := ":" + strconv.Itoa(p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
