package apiserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers/fake"
)

// TestMemoryPersistence: with persistence "memory" a stop archives the
// home and suspends the machine; the next start resumes that machine (the
// same daemon, with what only it holds) without a create or a restore; the
// reconciler keeps a suspended machine; a machine that cannot be resumed,
// a start from a named checkpoint and a disconnect each drop it, and the
// first two wake from an archive instead.
func TestMemoryPersistence(t *testing.T) {
	e := newHomeEnv(t)
	e.fake.SetSuspendable(true)
	e.connectHome("mem", map[string]any{"persistence": "memory"})
	if s := e.status("mem"); s.Connection.Persistence != api.PersistenceMemory || s.Connection.IdleSleepSeconds != 600 {
		t.Fatalf("status = %+v", s.Connection)
	}
	e.mustCall("POST", "/v1/agents/mem/computer/start", nil, 200, nil)
	e.exec("mem", "echo kept > kept.txt")
	machine := onlyMachine(t, e)

	counts := func(wantCreates, wantDestroys, wantSuspends, wantResumes int) {
		t.Helper()
		c, d := e.fake.Counts()
		s, r := e.fake.Suspended()
		if c != wantCreates || d != wantDestroys || s != wantSuspends || r != wantResumes {
			t.Fatalf("creates %d, destroys %d, suspends %d, resumes %d; want %d, %d, %d, %d", c, d, s, r, wantCreates, wantDestroys, wantSuspends, wantResumes)
		}
	}
	reconcile := func() {
		t.Helper()
		rep, err := e.svc.Reconcile(context.Background())
		if err != nil || rep.Destroyed != 0 {
			t.Fatalf("reconcile: %+v, %v; want nothing destroyed", rep, err)
		}
	}

	// Stop: archived, then suspended instead of destroyed.
	var stopped api.Session
	e.mustCall("POST", "/v1/agents/mem/computer/stop", nil, 200, &stopped)
	if stopped.State != "stopped" {
		t.Fatalf("stop = %+v", stopped)
	}
	counts(1, 0, 1, 0)
	s := e.status("mem")
	if s.State != api.StateSleeping || s.Archive == nil || !s.Archive.Suspended {
		t.Fatalf("status after stop = %+v (archive %+v), want sleeping with a suspended machine", s, s.Archive)
	}
	reconcile()
	counts(1, 0, 1, 0)
	// Only the suspended machine holds this: a wake from the archive would
	// not bring it back.
	if err := os.WriteFile(filepath.Join(e.fake.Home(machine), "only-in-the-machine"), []byte("yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Start: the same machine resumed.
	var woke api.Session
	e.mustCall("POST", "/v1/agents/mem/computer/start", nil, 200, &woke)
	if woke.State != "running" || woke.ID == stopped.ID {
		t.Fatalf("start = %+v", woke)
	}
	counts(1, 0, 1, 1)
	if got := e.exec("mem", "cat only-in-the-machine kept.txt").Stdout; got != "yes\nkept\n" {
		t.Fatalf("after resume: %q", got)
	}
	if got := onlyMachine(t, e); got != machine {
		t.Fatalf("running on %s, want the resumed %s", got, machine)
	}
	reconcile()
	if s := e.status("mem"); s.State != "running" || s.Archive == nil || s.Archive.Suspended {
		t.Fatalf("status while running = %+v (archive %+v)", s, s.Archive)
	}

	// A suspended machine that cannot be resumed is dropped; the start
	// wakes from the archive on a new machine.
	e.mustCall("POST", "/v1/agents/mem/computer/stop", nil, 200, nil)
	counts(1, 0, 2, 1)
	e.fake.UpdateFaults(func(f *fake.Faults) { f.FailResumes = 1 })
	e.mustCall("POST", "/v1/agents/mem/computer/start", nil, 200, nil)
	counts(2, 1, 2, 1)
	if got := e.exec("mem", "cat kept.txt; ls").Stdout; got != "kept\nkept.txt\nonly-in-the-machine\n" {
		t.Fatalf("after a wake from the archive: %q", got)
	}
	machine = onlyMachine(t, e)

	// A start from a named checkpoint drops the suspended machine.
	e.mustCall("POST", "/v1/agents/mem/computer/checkpoints", map[string]any{"name": "cp"}, 200, nil)
	e.exec("mem", "echo later > later.txt")
	e.mustCall("POST", "/v1/agents/mem/computer/stop", nil, 200, nil)
	counts(2, 1, 3, 1)
	e.mustCall("POST", "/v1/agents/mem/computer/start", map[string]any{"checkpoint": "cp"}, 200, nil)
	counts(3, 2, 3, 1)
	if got := e.exec("mem", "ls").Stdout; strings.Contains(got, "later.txt") || !strings.Contains(got, "kept.txt") {
		t.Fatalf("after a start from the checkpoint: %q", got)
	}
	if onlyMachine(t, e) == machine {
		t.Fatal("started from the checkpoint on the suspended machine")
	}

	// Disconnect removes the suspended machine with the archives.
	e.mustCall("POST", "/v1/agents/mem/computer/stop", nil, 200, nil)
	counts(3, 2, 4, 1)
	e.mustCall("DELETE", "/v1/agents/mem/computer", nil, 200, nil)
	counts(3, 3, 4, 1)
	if ms, _ := e.fake.List(context.Background()); len(ms) != 0 {
		t.Fatalf("machines after disconnect: %v", ms)
	}
}

// onlyMachine returns the id of the fake provider's one machine.
func onlyMachine(t *testing.T, e *homeEnv) string {
	t.Helper()
	ms, err := e.fake.List(context.Background())
	if err != nil || len(ms) != 1 {
		t.Fatalf("machines = %v (%v), want one", ms, err)
	}
	return ms[0].ID
}

// TestMemoryPersistenceRefused: a provider that cannot suspend its
// machines refuses persistence "memory" at connect, saying why and that
// "home" keeps the files.
func TestMemoryPersistenceRefused(t *testing.T) {
	e := newHomeEnv(t)
	e.mustCall("POST", "/v1/agents", map[string]any{"id": "m", "name": "m"}, 201, nil)
	var out struct {
		Error struct{ Code, Message string }
	}
	st, _ := e.call("POST", "/v1/computers", map[string]any{"agent": "m", "provider": "fake", "persistence": "memory"}, &out)
	if st != 400 || !strings.Contains(out.Error.Message, "not available on the fake provider") || !strings.Contains(out.Error.Message, `"home" keeps`) {
		t.Fatalf("connect with memory on a provider that cannot suspend: %d %+v", st, out.Error)
	}
}

// TestMemoryIdleSleep: a computer with persistence "memory" left without
// tool calls for its idleSleepSeconds is suspended at the reaper's next
// pass, its unused time comes back, and the next start resumes it.
func TestMemoryIdleSleep(t *testing.T) {
	e := newHomeEnv(t)
	e.fake.SetSuspendable(true)
	e.connectHome("nap", map[string]any{"persistence": "memory", "idleSleepSeconds": 120})
	e.mustCall("POST", "/v1/agents/nap/computer/start", nil, 200, nil)
	machine := onlyMachine(t, e)
	e.clock.Advance(121 * time.Second)
	e.svc.Reap(context.Background())
	s := e.status("nap")
	if s.State != api.StateSleeping || s.Archive == nil || !s.Archive.Suspended {
		t.Fatalf("status after 121 s without a call = %+v (archive %+v), want sleeping, suspended", s, s.Archive)
	}
	if s.Budget.UsedSeconds != 121 || s.Budget.ReservedSeconds != 0 {
		t.Fatalf("budget after the idle sleep = %+v, want 121 s used and nothing reserved", s.Budget)
	}
	e.mustCall("POST", "/v1/agents/nap/computer/start", nil, 200, nil)
	if c, d := e.fake.Counts(); c != 1 || d != 0 || onlyMachine(t, e) != machine {
		t.Fatalf("after the wake: creates %d, destroys %d; want the one machine resumed", c, d)
	}
}
