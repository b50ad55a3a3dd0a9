package providertest

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// scenarioTools starts a computer, runs the four other tools on it, stops
// it and checks that the machine is gone and that the next start begins
// empty.
func scenarioTools(t T, h Harness) {
	e := newEnv(t, h)
	e.connect("tools")
	v := e.start("tools")
	if v.RemainingSeconds <= 0 || v.RemainingSeconds > 300 {
		t.Errorf("start: remainingSeconds %d, want 1..300", v.RemainingSeconds)
	}
	x := e.session(v.ID)
	if !e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Errorf("the backend holds no machine labelled %s=%s after a start", providers.LabelAttempt, x.AttemptID)
	}
	// The same start again returns the running session.
	var again supervisor.SessionView
	e.must("POST", "/v1/agents/tools/computer/start", nil, http.StatusOK, &again)
	if again.ID != v.ID {
		t.Errorf("a second start made session %s, want the running %s", again.ID, v.ID)
	}

	r := e.exec("tools", "echo out; echo err >&2; exit 3")
	if r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exec: %+v, want exit 3, stdout \"out\\n\", stderr \"err\\n\"", r)
	}
	content := "conformance ✓\nline two\n"
	var w supervisor.WriteResult
	e.must("POST", "/v1/agents/tools/computer/write_file", map[string]any{"path": "notes/a.txt", "content": content}, http.StatusOK, &w)
	sum := sha256.Sum256([]byte(content))
	if w.Bytes != int64(len(content)) || w.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("write: %+v, want %d bytes with sha256 %x", w, len(content), sum)
	}
	var rd supervisor.ReadResult
	e.must("POST", "/v1/agents/tools/computer/read_file", map[string]any{"path": "notes/a.txt"}, http.StatusOK, &rd)
	if rd.Content != content || rd.Truncated {
		t.Errorf("read: %+v, want %q", rd, content)
	}
	// Files and the shell's view of them survive between calls.
	if r := e.exec("tools", "cat notes/a.txt && echo x > notes/b.txt"); r.ExitCode != 0 || r.Stdout != content {
		t.Errorf("exec cat: %+v, want %q", r, content)
	}
	e.must("POST", "/v1/agents/tools/computer/read_file", map[string]any{"path": "notes/b.txt"}, http.StatusOK, &rd)
	if rd.Content != "x\n" {
		t.Errorf("read of a file exec wrote: %q, want \"x\\n\"", rd.Content)
	}
	if a := e.call("POST", "/v1/agents/tools/computer/read_file", map[string]any{"path": "notes/missing.txt"}, nil); a.Status != http.StatusNotFound {
		t.Errorf("read of a missing file: %d %s, want 404", a.Status, a.Code)
	}

	var s supervisor.SessionView
	e.must("POST", "/v1/agents/tools/computer/stop", nil, http.StatusOK, &s)
	if s.State != store.StateStopped {
		t.Errorf("stop: state %s, want %s", s.State, store.StateStopped)
	}
	if e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Errorf("the backend still holds the machine of a stopped session (%s=%s)", providers.LabelAttempt, x.AttemptID)
	}
	if a := e.call("POST", "/v1/agents/tools/computer/exec", map[string]any{"command": "true"}, nil); a.Status != http.StatusConflict || a.Code != supervisor.CodeNoSession {
		t.Errorf("exec after stop: %d %s, want 409 %s", a.Status, a.Code, supervisor.CodeNoSession)
	}

	// The next start begins empty.
	v2 := e.start("tools")
	if v2.ID == v.ID {
		t.Errorf("start after stop returned the stopped session %s", v.ID)
	}
	if a := e.call("POST", "/v1/agents/tools/computer/read_file", map[string]any{"path": "notes/a.txt"}, nil); a.Status != http.StatusNotFound {
		t.Errorf("a new session sees the old session's file: %d %s, want 404", a.Status, a.Code)
	}
	e.must("POST", "/v1/agents/tools/computer/stop", nil, http.StatusOK, nil)
	if e.exists(providers.LabelSession, v2.ID) {
		t.Errorf("the backend still holds the machine of stopped session %s", v2.ID)
	}
	e.must("DELETE", "/v1/agents/tools/computer", nil, http.StatusOK, nil)
	e.checkNoSecrets()
}

// scenarioLostCreateReply loses the reply of an accepted create. A
// provider that tags its machines has the machine found by its attempt
// label and adopted; one that cannot leaves the session uncertain until a
// person confirms, and no second machine is made.
func scenarioLostCreateReply(t T, h Harness) {
	e := newEnv(t, h)
	e.connect("lost")
	e.faults.LoseNextCreateReply()
	if !h.Untagged {
		v := e.start("lost")
		x := e.session(v.ID)
		if !e.exists(providers.LabelAttempt, x.AttemptID) {
			t.Errorf("the adopted machine (%s=%s) is not on the backend", providers.LabelAttempt, x.AttemptID)
		}
		if r := e.exec("lost", "echo adopted"); r.Stdout != "adopted\n" || r.ExitCode != 0 {
			t.Errorf("exec on the adopted machine: %+v", r)
		}
		e.must("POST", "/v1/agents/lost/computer/stop", nil, http.StatusOK, nil)
		if e.exists(providers.LabelAttempt, x.AttemptID) {
			t.Errorf("the adopted machine is still on the backend after stop")
		}
		e.checkNoSecrets()
		return
	}
	a := e.call("POST", "/v1/agents/lost/computer/start", nil, nil)
	if a.Status != http.StatusBadGateway || a.Code != supervisor.CodeUncertain {
		t.Fatalf("start with a lost reply: %d %s %q, want 502 %s", a.Status, a.Code, a.Message, supervisor.CodeUncertain)
	}
	xs, err := e.st.SessionsByState(e.ctx, store.StateUncertain)
	if err != nil || len(xs) != 1 {
		t.Fatalf("uncertain sessions: %v %v, want one", xs, err)
	}
	if !e.exists(providers.LabelAgent, "lost") {
		t.Errorf("the fault did not make a machine: nothing labelled %s=lost on the backend", providers.LabelAgent)
	}
	if a := e.call("POST", "/v1/agents/lost/computer/start", nil, nil); a.Status != http.StatusConflict || a.Code != supervisor.CodeUncertain {
		t.Errorf("start while uncertain: %d %s, want 409 %s", a.Status, a.Code, supervisor.CodeUncertain)
	}
	e.must("POST", "/v1/agents/lost/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, http.StatusOK, nil)
	e.checkNoSecrets()
}

// scenarioFailingDelete makes the first two deletes fail: the stop
// answers stopping, the reaper retries with backoff, and the session ends
// with its machine gone.
func scenarioFailingDelete(t T, h Harness) {
	e := newEnv(t, h)
	e.connect("del")
	v := e.start("del")
	x := e.session(v.ID)
	e.faults.FailNextDeletes(2)
	var s supervisor.SessionView
	e.must("POST", "/v1/agents/del/computer/stop", nil, http.StatusOK, &s)
	if s.State != store.StateStopping {
		t.Fatalf("stop with a failing delete: state %s, want %s", s.State, store.StateStopping)
	}
	if !e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Errorf("the machine is gone although its delete failed")
	}
	if a := e.call("DELETE", "/v1/agents/del/computer", nil, nil); a.Status != http.StatusConflict {
		t.Errorf("disconnect while cleanup is owed: %d %s, want 409", a.Status, a.Code)
	}
	for i := 0; i < 10 && e.session(v.ID).State != store.StateStopped; i++ {
		e.clk.Advance(11 * time.Minute)
		e.svc.Reap(e.ctx)
	}
	if y := e.session(v.ID); y.State != store.StateStopped {
		t.Fatalf("after 10 reaper passes: state %s (%s), want %s", y.State, y.LastError, store.StateStopped)
	} else if y.CleanupTries < 1 {
		t.Errorf("cleanup tries %d: the failing delete was not recorded", y.CleanupTries)
	}
	if e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Errorf("the session ended but its machine is still on the backend")
	}
	e.must("DELETE", "/v1/agents/del/computer", nil, http.StatusOK, nil)
	e.checkNoSecrets()
}

// scenarioBadCredentials checks refused credentials: a provider that takes
// credentials answers a clear error at start, gives the reserved time back
// and leaves nothing behind; one that takes none refuses them at connect.
func scenarioBadCredentials(t T, h Harness) {
	e := newEnv(t, h)
	if e.target.Credentials == nil {
		e.must("POST", "/v1/agents", map[string]any{"id": "creds", "name": "creds"}, http.StatusCreated, nil)
		a := e.call("POST", "/v1/computers", map[string]any{"agent": "creds", "provider": e.id, "credentials": map[string]string{"apiKey": "not-for-this-provider"}}, nil)
		if a.Status != http.StatusBadRequest || a.Code != supervisor.CodeBadRequest || !strings.Contains(a.Message, "credentials") {
			t.Errorf("connect with credentials to a provider that takes none: %d %s %q, want 400 naming credentials", a.Status, a.Code, a.Message)
		}
		e.checkNoSecrets()
		return
	}
	e.connect("creds")
	e.faults.RefuseCredentials(true)
	a := e.call("POST", "/v1/agents/creds/computer/start", nil, nil)
	if a.Status != http.StatusBadGateway || a.Code != supervisor.CodeProvider || !strings.Contains(a.Message, "credentials") {
		t.Errorf("start with refused credentials: %d %s %q, want 502 %s saying the credentials were refused", a.Status, a.Code, a.Message, supervisor.CodeProvider)
	}
	var st supervisor.StatusView
	e.must("GET", "/v1/agents/creds/computer", nil, http.StatusOK, &st)
	if st.Session != nil {
		t.Errorf("a session is left after refused credentials: %+v", *st.Session)
	}
	if st.Budget.LeftSeconds != 3600 {
		t.Errorf("budget left %d after refused credentials, want the whole 3600 back", st.Budget.LeftSeconds)
	}
	if e.exists(providers.LabelAgent, "creds") {
		t.Errorf("a machine was made with refused credentials")
	}
	e.faults.RefuseCredentials(false)
	e.start("creds")
	e.must("POST", "/v1/agents/creds/computer/stop", nil, http.StatusOK, nil)
	e.checkNoSecrets()
}

// scenarioReconcile restarts the supervisor over the same store: the
// machine of a running session is kept and still serves, and a machine
// left behind by a session whose cleanup a person confirmed too early is
// found by its labels and removed. A provider that cannot list is left
// alone.
func scenarioReconcile(t T, h Harness) {
	e := newEnv(t, h)
	e.connect("rec")
	v := e.start("rec")
	x := e.session(v.ID)
	lx := e.leaveLeftover("left")

	svc := e.restart()
	rep := e.reconcile(svc, "reconcile")
	if h.Untagged {
		if rep.Machines != 0 || rep.Destroyed != 0 || rep.Vanished != 0 {
			t.Errorf("reconcile of a provider that cannot list: %+v, want nothing done", rep)
		}
	} else {
		if rep.Kept < 1 || rep.Destroyed < 1 || rep.Vanished != 0 {
			t.Errorf("reconcile: %+v, want the running machine kept and the leftover destroyed", rep)
		}
		if e.exists(providers.LabelAttempt, lx.AttemptID) {
			t.Errorf("the leftover machine is still on the backend after reconcile")
		}
	}
	e.checkKept(svc, "rec", x)
	e.checkNoSecrets()
}

// leaveLeftover connects agent and starts a session whose delete then
// fails and whose cleanup a person confirms too early, so that its machine
// is left on the backend. It returns the session.
func (e *env) leaveLeftover(agent string) store.Session {
	e.t.Helper()
	e.connect(agent)
	lv := e.start(agent)
	lx := e.session(lv.ID)
	e.faults.FailNextDeletes(1)
	var s supervisor.SessionView
	e.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, http.StatusOK, &s)
	if s.State != store.StateStopping {
		e.t.Fatalf("stop with a failing delete: %s, want %s", s.State, store.StateStopping)
	}
	e.must("POST", "/v1/agents/"+agent+"/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, http.StatusOK, nil)
	if !e.exists(providers.LabelAttempt, lx.AttemptID) {
		e.t.Fatalf("the leftover machine is not on the backend")
	}
	return lx
}

// reconcile runs svc's reconciliation and logs its report as what.
func (e *env) reconcile(svc *supervisor.Service, what string) supervisor.ReconcileReport {
	e.t.Helper()
	rep, err := svc.Reconcile(e.ctx)
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	e.t.Logf("%s: %+v", what, rep)
	return rep
}

// checkKept checks that reconciliation kept the machine of agent's
// running session x, that it still serves through svc, and that a stop
// removes it.
func (e *env) checkKept(svc *supervisor.Service, agent string, x store.Session) {
	e.t.Helper()
	if !e.exists(providers.LabelAttempt, x.AttemptID) {
		e.t.Fatalf("reconcile removed the machine of a running session")
	}
	r, err := svc.Exec(e.ctx, agent, supervisor.ExecRequest{Command: "echo still here"})
	if err != nil || r.Stdout != "still here\n" {
		e.t.Errorf("exec through the restarted supervisor: %+v %v", r, err)
	}
	e.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, http.StatusOK, nil)
	if e.exists(providers.LabelAttempt, x.AttemptID) {
		e.t.Errorf("the kept machine is still on the backend after stop")
	}
}

// scenarioSecrets runs a session through its ordinary and bad days and
// checks that no credential reaches the logs, an API answer, or the
// computer's environment.
func scenarioSecrets(t T, h Harness) {
	e := newEnv(t, h)
	e.connect("sec")
	if e.target.Credentials != nil {
		e.faults.RefuseCredentials(true)
		e.call("POST", "/v1/agents/sec/computer/start", nil, nil)
		e.faults.RefuseCredentials(false)
	}
	v := e.start("sec")
	r := e.exec("sec", "env; cat /proc/self/environ 2>/dev/null | tr '\\0' '\\n'")
	if r.ExitCode != 0 || !strings.Contains(r.Stdout, "BERTH_CONFORMANCE=1") {
		t.Errorf("env in the computer: exit %d, and the supervisor's computer environment (BERTH_CONFORMANCE=1) is missing:\n%s", r.ExitCode, r.Stdout)
	}
	for _, s := range e.secrets() {
		if strings.Contains(r.Stdout+r.Stderr, s) {
			t.Errorf("a credential (%d characters) is in the computer's environment", len(s))
		}
	}
	e.must("GET", "/v1/agents/sec/computer", nil, http.StatusOK, nil)
	e.must("GET", "/v1/computers", nil, http.StatusOK, nil)
	e.faults.FailNextDeletes(1)
	e.must("POST", "/v1/agents/sec/computer/stop", nil, http.StatusOK, nil)
	for i := 0; i < 5 && e.session(v.ID).State != store.StateStopped; i++ {
		e.clk.Advance(11 * time.Minute)
		e.svc.Reap(e.ctx)
	}
	e.must("DELETE", "/v1/agents/sec/computer", nil, http.StatusOK, nil)
	if len(e.secrets()) > 0 && e.logs.String() == "" {
		t.Errorf("no logs were captured: the check for credentials in logs saw nothing")
	}
	e.checkNoSecrets()
}
