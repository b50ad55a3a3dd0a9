// Package storetest is the conformance suite of store.Store. Every
// implementation runs it (sqlstore runs it on SQLite and on PostgreSQL), so
// that all of them keep one contract: agents and connections, reservations
// against the daily budget, compare-and-set session updates, the reaper's
// queries, usage, idempotency records, instance liveness and session
// claims, viewer and desktop seats, also under concurrent use.
//
// The suite takes its times from fixed instants, never from the clock, and
// never sleeps.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// Run runs the suite. open returns a new, empty store for one test; Run
// closes it when that test ends. The tests run in parallel, each on its
// own store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Agents", testAgents},
		{"Connections", testConnections},
		{"ReserveGrantsLease", testReserveGrantsLease},
		{"ReserveLive", testReserveLive},
		{"ReserveGrantsWhatIsLeft", testReserveGrantsWhatIsLeft},
		{"ReserveBelowMinimum", testReserveBelowMinimum},
		{"StopGivesTimeBack", testStopGivesTimeBack},
		{"DayOfCreation", testDayOfCreation},
		{"MidnightReset", testMidnightReset},
		{"UpdateSession", testUpdateSession},
		{"UpdateSessionConcurrent", testUpdateSessionConcurrent},
		{"SessionsDue", testSessionsDue},
		{"SessionsByState", testSessionsByState},
		{"Usage", testUsage},
		{"Calls", testCalls},
		{"PurgeCalls", testPurgeCalls},
		{"Heartbeat", testHeartbeat},
		{"ClaimSession", testClaimSession},
		{"Meta", testMeta},
		{"ConcurrentReserve", testConcurrentReserve},
		{"ConcurrentBeginCall", testConcurrentBeginCall},
		{"Keys", testKeys}, {"Audit", testAudit}, {"Companions", testCompanions},
		{"Pairing", testPairing}, {"PairCodeExpiry", testPairCodeExpiry}, {"ConcurrentRedeem", testConcurrentRedeem},
		{"Pool", testPool}, {"ConcurrentPoolClaim", testConcurrentPoolClaim},
		{"SeatLimit", testSeatLimit}, {"SeatExpiry", testSeatExpiry}, {"SeatRenewLeave", testSeatRenewLeave},
		{"PurgeSeats", testPurgeSeats}, {"ConcurrentSeats", testConcurrentSeats},
		{"PersistentConnection", testPersistentConnection}, {"Archives", testArchives},
		{"CheckpointLimit", testCheckpointLimit}, {"ConcurrentCheckpoints", testConcurrentCheckpoints},
		{"IdleSleepDue", testIdleSleepDue}, {"SuspendedSessions", testSuspendedSessions},
		{"BrowserOptions", testBrowserOptions}, {"DesktopSeats", testDesktopSeats}, {"ConsoleSessions", testConsoleSessions},
		{"LenderLinks", testLenderLinks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tt.fn(t, s)
		})
	}
}

// t0 is the suite's "now": a Tuesday morning, UTC.
var t0 = time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const minSeconds = 60

func testContext(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		t.Cleanup(cancel)
	}
	return ctx
}

// connect creates an agent in workspace ws with a connection to provider.
func connect(t *testing.T, s store.Store, agent, ws, provider string, lease, daily int) {
	t.Helper()
	ctx := testContext(t)
	if err := s.CreateAgent(ctx, store.Agent{ID: agent, Name: "agent " + agent, Workspace: ws, CreatedAt: t0}); err != nil {
		t.Fatalf("create agent %s: %v", agent, err)
	}
	c := store.Connection{AgentID: agent, Provider: provider, Image: "headless", LeaseSeconds: lease,
		DailySeconds: daily, CreatedAt: t0, Credentials: []byte("sealed:" + agent)}
	if err := s.CreateConnection(ctx, c); err != nil {
		t.Fatalf("create connection %s: %v", agent, err)
	}
}

func reservation(agent, id string, now time.Time) store.Reservation {
	return store.Reservation{
		Session:    store.Session{ID: id, AgentID: agent, ComputerID: "c-" + id, AttemptID: "a-" + id},
		Now:        now,
		MinSeconds: minSeconds,
	}
}

// reserve reserves a session and fails the test when it cannot.
func reserve(t *testing.T, s store.Store, agent, id string, now time.Time) store.Session {
	t.Helper()
	x, err := s.Reserve(testContext(t), reservation(agent, id, now))
	if err != nil {
		t.Fatalf("reserve %s for %s at %s: %v", id, agent, now.Format(time.RFC3339), err)
	}
	return x
}

// move sets x's state through UpdateSession, from the state x has.
func move(t *testing.T, s store.Store, x *store.Session, state string) {
	t.Helper()
	from := x.State
	x.State = state
	if err := s.UpdateSession(testContext(t), *x, from); err != nil {
		t.Fatalf("session %s %s -> %s: %v", x.ID, from, state, err)
	}
}

// end stops x as the supervisor does: stopping with its charge fixed, then
// stopped.
func end(t *testing.T, s store.Store, x *store.Session, charged int, now time.Time) {
	t.Helper()
	x.ChargedSeconds = charged
	x.NextCleanupAt = now
	move(t, s, x, store.StateStopping)
	x.EndedAt = now
	move(t, s, x, store.StateStopped)
}

func budget(t *testing.T, s store.Store, agent string, now time.Time) store.Budget {
	t.Helper()
	b, err := s.Budget(testContext(t), agent, now)
	if err != nil {
		t.Fatalf("budget of %s: %v", agent, err)
	}
	return b
}

func checkBudget(t *testing.T, got store.Budget, day string, daily, used, reserved, left int) {
	t.Helper()
	want := store.Budget{Day: day, DailySeconds: daily, UsedSeconds: used, ReservedSeconds: reserved, LeftSeconds: left}
	got.ResetsAt = time.Time{}
	if got != want {
		t.Errorf("budget = %+v, want %+v", got, want)
	}
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// diffSession lists the fields in which got differs from want.
func diffSession(got, want store.Session) string {
	var d []string
	str := func(name, g, w string) {
		if g != w {
			d = append(d, fmt.Sprintf("%s %q, want %q", name, g, w))
		}
	}
	num := func(name string, g, w int) {
		if g != w {
			d = append(d, fmt.Sprintf("%s %d, want %d", name, g, w))
		}
	}
	tm := func(name string, g, w time.Time) {
		if !g.Equal(w) {
			d = append(d, fmt.Sprintf("%s %s, want %s", name, g, w))
		}
	}
	str("ID", got.ID, want.ID)
	str("AgentID", got.AgentID, want.AgentID)
	str("Workspace", got.Workspace, want.Workspace)
	str("Provider", got.Provider, want.Provider)
	str("Image", got.Image, want.Image)
	str("ComputerID", got.ComputerID, want.ComputerID)
	str("AttemptID", got.AttemptID, want.AttemptID)
	str("State", got.State, want.State)
	str("MachineID", got.MachineID, want.MachineID)
	str("Endpoint", got.Endpoint, want.Endpoint)
	str("Header", got.Header, want.Header)
	str("Day", got.Day, want.Day)
	num("ReservedSeconds", got.ReservedSeconds, want.ReservedSeconds)
	num("ChargedSeconds", got.ChargedSeconds, want.ChargedSeconds)
	tm("CreatedAt", got.CreatedAt, want.CreatedAt)
	tm("ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	tm("EndedAt", got.EndedAt, want.EndedAt)
	num("CleanupTries", got.CleanupTries, want.CleanupTries)
	tm("NextCleanupAt", got.NextCleanupAt, want.NextCleanupAt)
	str("LastError", got.LastError, want.LastError)
	str("Owner", got.Owner, want.Owner)
	tm("ClaimUntil", got.ClaimUntil, want.ClaimUntil)
	str("Home", got.Home, want.Home)
	str("WakeFrom", got.WakeFrom, want.WakeFrom)
	tm("SleepAt", got.SleepAt, want.SleepAt)
	return strings.Join(d, "; ")
}

func checkStored(t *testing.T, s store.Store, want store.Session) {
	t.Helper()
	got, err := s.GetSession(testContext(t), want.ID)
	if err != nil {
		t.Fatalf("get session %s: %v", want.ID, err)
	}
	if d := diffSession(got, want); d != "" {
		t.Errorf("stored session %s: %s", want.ID, d)
	}
}

func ids(xs []store.Session) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.ID
	}
	sort.Strings(out)
	return out
}
