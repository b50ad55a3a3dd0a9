package providertest

import (
	"github.com/berthdev/berth/providers"
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
	lx := e.leaveLeftover("left")
	rep := e.reconcile(e.restart(), "reconcile with a leftover")
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
	rep = e.reconcile(svc, "reconcile with a running session")
	if rep.Kept < 1 || rep.Destroyed != 0 || rep.Vanished != 0 {
		t.Errorf("reconcile: %+v, want the running machine kept and nothing destroyed", rep)
	}
	e.checkKept(svc, "rec", x)
	e.checkNoSecrets()
}
