package main

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/berthdev/berth/supervisor/supervisortest"
)

func TestConnectPersistent(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/computers", http.StatusCreated, `{"agent":"a1","provider":"docker","image":"headless","leaseSeconds":900,"dailySeconds":3600,
		"persistence":"home","idleSleepSeconds":300,"maxCheckpoints":20,"createdAt":"2025-01-02T03:04:05Z"}`)
	run(t, "", "computer", "connect", "--agent", "a1", "--provider", "docker", "--persistence", "home", "--idle-sleep", "300", "--max-checkpoints", "20").
		want(t, 0, "connected agent a1 to docker: image headless, sessions up to 15m0s, 1h0m0s a day; "+
			"keeps its home folder, sleeps after 5m0s without tool calls, up to 20 checkpoints\n", "")
	jsonEqual(t, s.only(t).Body, `{"agent":"a1","provider":"docker","persistence":"home","idleSleepSeconds":300,"maxCheckpoints":20}`)
}

func TestConnectPersistenceUsage(t *testing.T) {
	s := newSupervisor(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--persistence", "disk"}, `--persistence "disk": want none, home or memory`},
		{[]string{"--idle-sleep", "300"}, "--idle-sleep and --max-checkpoints need --persistence home or memory"},
		{[]string{"--persistence", "none", "--max-checkpoints", "3"}, "need --persistence home or memory"},
		{[]string{"--persistence", "home", "--max-checkpoints", "0"}, "--max-checkpoints 0: want 1..100"},
		{[]string{"--persistence", "home", "--idle-sleep", "0"}, "--idle-sleep 0: want 60..3600 seconds"},
	} {
		r := run(t, "", append([]string{"computer", "connect", "--agent", "a1"}, tt.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("connect %v: %+v, want a usage error with %q", tt.args, r, tt.want)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests for refused command lines", n)
	}
}

func TestStartFromCheckpoint(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, runningSession)
	run(t, "", "computer", "start", "--agent", "a1", "--checkpoint", "v1").
		want(t, 0, "session s1 running on docker (headless), 15m0s left, until 2025-01-02T03:19:05Z\n"+
			"home folder restored from checkpoint v1\n", "")
	c := s.only(t)
	if c.Method != "POST" || c.Path != "/v1/agents/a1/computer/start" || c.Key == "" {
		t.Errorf("request = %+v", c)
	}
	jsonEqual(t, c.Body, `{"checkpoint":"v1"}`)

	if r := run(t, "", "computer", "start", "--agent", "a1", "--checkpoint", ""); r.code != exitUsage || !strings.Contains(r.stderr, "--checkpoint needs a name") {
		t.Errorf("empty --checkpoint: %+v", r)
	}
}

func TestStartFromCheckpointRefused(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusConflict, `{"error":{"code":"conflict","message":"agent \"a1\"'s computer is running; stop it before starting from checkpoint \"v1\""}}`)
	run(t, "", "computer", "start", "--agent", "a1", "--checkpoint", "v1").
		want(t, exitFailure, "", "berth: agent \"a1\"'s computer is running; stop it before starting from checkpoint \"v1\" (conflict)\n")
}

func TestCheckpointCommands(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/checkpoints", http.StatusOK, `{"name":"before-upgrade","bytes":1536000,"createdAt":"2025-01-02T03:10:00Z","image":"headless"}`)
	s.on("GET /v1/agents/a1/computer/checkpoints", http.StatusOK, `{"checkpoints":[
		{"name":"before-upgrade","bytes":1536000,"createdAt":"2025-01-02T03:10:00Z","image":"headless"},
		{"name":"v2","bytes":812,"createdAt":"2025-01-03T00:00:00Z","image":"desktop"}]}`)
	s.on("DELETE /v1/agents/a1/computer/checkpoints/before-upgrade", http.StatusOK, `{"agent":"a1","checkpoint":"before-upgrade","deleted":true}`)

	run(t, "", "computer", "checkpoint", "--agent", "a1", "before-upgrade").
		want(t, 0, "checkpoint before-upgrade of agent a1: 1.5 MB, made on headless at 2025-01-02T03:10:00Z\n", "")
	run(t, "", "computer", "checkpoints", "--agent", "a1").want(t, 0, ""+
		"NAME            SIZE       CREATED               IMAGE\n"+
		"before-upgrade  1.5 MB     2025-01-02T03:10:00Z  headless\n"+
		"v2              812 bytes  2025-01-03T00:00:00Z  desktop\n", "")
	run(t, "", "computer", "checkpoints", "delete", "--agent", "a1", "before-upgrade").
		want(t, 0, "deleted checkpoint before-upgrade of agent a1\n", "")

	calls := s.requests()
	if len(calls) != 3 {
		t.Fatalf("%d requests, want 3: %+v", len(calls), calls)
	}
	for i, want := range []string{"POST /v1/agents/a1/computer/checkpoints", "GET /v1/agents/a1/computer/checkpoints", "DELETE /v1/agents/a1/computer/checkpoints/before-upgrade"} {
		if got := calls[i].Method + " " + calls[i].Path; got != want {
			t.Errorf("request %d = %s, want %s", i, got, want)
		}
	}
	jsonEqual(t, calls[0].Body, `{"name":"before-upgrade"}`)
	if calls[0].Key == "" || calls[2].Key == "" {
		t.Error("a checkpoint or its deletion was sent without an idempotency key")
	}

	// --json prints the answers as they came.
	r := run(t, "", "--json", "computer", "checkpoints", "--agent", "a1")
	if r.code != 0 || !strings.Contains(r.stdout, `"checkpoints": [`) || !strings.Contains(r.stdout, `"bytes": 812`) {
		t.Errorf("checkpoints --json: %+v", r)
	}
	r = run(t, "", "--json", "computer", "checkpoints", "delete", "--agent", "a1", "before-upgrade")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	jsonEqual(t, r.stdout, `{"agent":"a1","checkpoint":"before-upgrade","deleted":true}`)
}

func TestCheckpointsNone(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer/checkpoints", http.StatusOK, `{"checkpoints":[]}`)
	run(t, "", "computer", "checkpoints", "--agent", "a1").want(t, 0, "agent a1 has no checkpoints\n", "")
}

func TestCheckpointUsage(t *testing.T) {
	s := newSupervisor(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"computer", "checkpoint", "--agent", "a1"}, "accepts 1 arg(s), received 0"},
		{[]string{"computer", "checkpoint", "--agent", "a1", "delete", "v1"}, "to delete a checkpoint, run: berth computer checkpoints delete v1"},
		{[]string{"computer", "checkpoints", "--agent", "a1", "v1"}, `unknown command "v1"`},
		{[]string{"computer", "checkpoints", "delete", "--agent", "a1"}, "accepts 1 arg(s), received 0"},
		{[]string{"computer", "checkpoints"}, "no agent"},
	} {
		r := run(t, "", tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v: %+v, want a usage error with %q", tt.args, r, tt.want)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests for refused command lines", n)
	}
}

func TestStatusSleeping(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer", http.StatusOK, `{
		"connection":{"agent":"a1","provider":"docker","image":"headless","leaseSeconds":900,"dailySeconds":3600,
			"persistence":"home","idleSleepSeconds":600,"maxCheckpoints":10,"createdAt":"2025-01-01T00:00:00Z"},
		"state":"sleeping","session":null,
		"archive":{"bytes":20480000,"createdAt":"2025-01-02T03:19:05Z","image":"headless"},
		"budget":{"day":"2025-01-02","dailySeconds":3600,"usedSeconds":900,"reservedSeconds":0,"leftSeconds":2700,"resetsAt":"2025-01-03T00:00:00Z"}}`)
	run(t, "", "computer", "status", "--agent", "a1").want(t, 0, ""+
		"agent        a1\n"+
		"provider     docker\n"+
		"image        headless\n"+
		"lease        15m0s\n"+
		"persistence  home, sleeps after 10m0s without tool calls, up to 10 checkpoints\n"+
		"session      none: sleeping, the next start wakes the home from its archive\n"+
		"archive      20.5 MB, made on headless at 2025-01-02T03:19:05Z\n"+
		"budget       45m0s left of 1h0m0s today (15m0s used, 0s reserved), resets 2025-01-03T00:00:00Z\n", "")
}

func TestUsageStored(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/usage", http.StatusOK, `{"by":"provider","rows":[{"key":"docker","seconds":90,"sessions":2}],
		"stored":[{"agent":"a1","workspace":"default","bytes":1536000,"archives":2},{"agent":"b2","workspace":"lab","bytes":2500000000,"archives":1}]}`)
	run(t, "", "usage").want(t, 0, ""+
		"PROVIDER  SESSIONS  SECONDS  TIME\n"+
		"docker    2         90       1m30s\n"+
		"\n"+
		"archives of persistent computers stored now\n"+
		"AGENT  WORKSPACE  ARCHIVES  BYTES       SIZE\n"+
		"a1     default    2         1536000     1.5 MB\n"+
		"b2     lab        1         2500000000  2.5 GB\n"+
		"TOTAL             3         2501536000  2.5 GB\n", "")
}

// persistentSupervisor serves a real supervisor over the fake provider,
// keeping archives sealed in a local object store, with agent a1 created
// in workspace lab and berth pointed at it.
func persistentSupervisor(t *testing.T) {
	t.Helper()
	s := supervisortest.Start(t, supervisortest.Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	s.Agent(t, "a1", "lab", nil)
	t.Setenv("BERTH_URL", s.URL)
	t.Setenv("SUPERVISOR_TOKEN", testToken)
	t.Setenv("BERTH_AGENT", "a1")
}

// TestPersistentComputer drives a persistent computer through berth
// against a real supervisor: connect, checkpoint, sleep, wake from the
// sleep and from the checkpoint, status, usage, delete.
func TestPersistentComputer(t *testing.T) {
	persistentSupervisor(t)
	ok := func(args ...string) string {
		t.Helper()
		r := run(t, "", args...)
		if r.code != 0 {
			t.Fatalf("berth %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
		}
		return r.stdout
	}
	if out := ok("computer", "connect", "--persistence", "home", "--idle-sleep", "120", "--max-checkpoints", "2"); !strings.Contains(out,
		"keeps its home folder, sleeps after 2m0s without tool calls, up to 2 checkpoints") {
		t.Errorf("connect: %q", out)
	}
	ok("computer", "start")
	ok("computer", "exec", "--", "echo first > notes.txt")
	if out := ok("computer", "checkpoint", "v1"); !strings.HasPrefix(out, "checkpoint v1 of agent a1: ") || !strings.Contains(out, "made on headless at ") {
		t.Errorf("checkpoint: %q", out)
	}
	ok("computer", "exec", "--", "echo second > notes.txt")
	ok("computer", "stop")

	status := ok("computer", "status")
	for _, want := range []string{"persistence  home, sleeps after 2m0s", "session      none: sleeping", "archive      "} {
		if !strings.Contains(status, want) {
			t.Errorf("status does not show %q:\n%s", want, status)
		}
	}
	usage := ok("usage")
	if !strings.Contains(usage, "archives of persistent computers stored now") || !strings.Contains(usage, "a1     lab        2 ") {
		t.Errorf("usage:\n%s", usage)
	}
	list := ok("computer", "checkpoints")
	if lines := strings.Split(strings.TrimSpace(list), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "v1  ") || !strings.HasSuffix(lines[1], "  headless") {
		t.Errorf("checkpoints:\n%s", list)
	}

	// A plain start wakes from the last sleep.
	ok("computer", "start")
	if out := ok("computer", "read", "notes.txt"); out != "second\n" {
		t.Errorf("notes.txt after the wake = %q, want second", out)
	}
	if out := ok("computer", "status"); !strings.Contains(out, "session      s_") || !strings.Contains(out, " running ") {
		t.Errorf("status while running:\n%s", out)
	}
	// A start from a checkpoint waits for a stop.
	r := run(t, "", "computer", "start", "--checkpoint", "v1")
	if r.code != exitFailure || !strings.Contains(r.stderr, "stop it before starting from checkpoint") {
		t.Errorf("start --checkpoint while running: %+v", r)
	}
	ok("computer", "stop")
	if out := ok("computer", "start", "--checkpoint", "v1"); !strings.HasSuffix(out, "home folder restored from checkpoint v1\n") {
		t.Errorf("start --checkpoint: %q", out)
	}
	if out := ok("computer", "read", "notes.txt"); out != "first\n" {
		t.Errorf("notes.txt after the wake from v1 = %q, want first", out)
	}

	ok("computer", "checkpoints", "delete", "v1")
	if out := ok("computer", "checkpoints"); out != "agent a1 has no checkpoints\n" {
		t.Errorf("checkpoints after the delete: %q", out)
	}
	r = run(t, "", "computer", "checkpoints", "delete", "v1")
	if r.code != exitFailure || !strings.Contains(r.stderr, `checkpoint "v1" of agent "a1" does not exist (not_found)`) {
		t.Errorf("a second delete: %+v", r)
	}
	ok("computer", "stop")
	ok("computer", "disconnect")
}
