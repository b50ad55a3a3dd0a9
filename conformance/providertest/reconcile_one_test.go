package providertest

import (
	"net/http"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// ReconcileOneAtATime is Reconcile for a backend that holds one session's
// machine at a time on a connection (a `berth agent tunnel` runner), for
// the tests of this package: a leftover whose cleanup a person confirmed
// too early is found after a restart and removed, which frees the backend
// for the next session; then a running session's machine is kept by the
// next restart and still serves.
var ReconcileOneAtATime = Scenario{"ReconcileOneAtATime", scenarioReconcileOneAtATime}

func scenarioReconcileOneAtATime(t T, h Harness) {
	e := newEnv(t, h)
	e.connect("left")
	lv := e.start("left")
	lx := e.session(lv.ID)
	e.faults.FailNextDeletes(1)
	var s supervisor.SessionView
	e.must("POST", "/v1/agents/left/computer/stop", nil, http.StatusOK, &s)
	if s.State != store.StateStopping {
		t.Fatalf("stop with a failing delete: %s, want %s", s.State, store.StateStopping)
	}
	e.must("POST", "/v1/agents/left/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, http.StatusOK, nil)
	if !e.exists(providers.LabelAttempt, lx.AttemptID) {
		t.Fatalf("the leftover machine is not on the backend")
	}
	rep, err := e.restart().Reconcile(e.ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	t.Logf("reconcile with a leftover: %+v", rep)
	if rep.Destroyed < 1 || rep.Vanished != 0 {
		t.Errorf("reconcile: %+v, want the leftover destroyed", rep)
	}
	if e.exists(providers.LabelAttempt, lx.AttemptID) {
		t.Errorf("the leftover machine is still on the backend after reconcile")
	}

	e.connect("rec")
	v := e.start("rec")
	x := e.session(v.ID)
	svc := e.restart()
	rep, err = svc.Reconcile(e.ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	t.Logf("reconcile with a running session: %+v", rep)
	if rep.Kept < 1 || rep.Destroyed != 0 || rep.Vanished != 0 {
		t.Errorf("reconcile: %+v, want the running machine kept and nothing destroyed", rep)
	}
	if !e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Fatalf("reconcile removed the machine of a running session")
	}
	r, err := svc.Exec(e.ctx, "rec", supervisor.ExecRequest{Command: "echo still here"})
	if err != nil || r.Stdout != "still here\n" {
		t.Errorf("exec through the restarted supervisor: %+v %v", r, err)
	}
	e.must("POST", "/v1/agents/rec/computer/stop", nil, http.StatusOK, nil)
	if e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Errorf("the kept machine is still on the backend after stop")
	}
	e.checkNoSecrets()
}
