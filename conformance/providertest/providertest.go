// Package providertest is the conformance suite every Berth provider runs:
// the same scenarios, through the real supervisor (an in-process
// supervisor.Service behind its REST API, a SQLite store in a temporary
// folder and a fake clock), against the provider's real backend or a local
// fake of its documented API.
//
// A provider's test calls Run with a Harness that says how to build the
// provider and its backend for one scenario:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, providertest.Harness{
//			New: func(t providertest.T, log *slog.Logger) providertest.Target {
//				api := newFakeAPI(t)
//				return providertest.Target{
//					Provider:    New(Options{URL: api.URL, Logger: log}),
//					Credentials: map[string]string{"apiKey": api.Key},
//					Faults:      api,
//					Exists:      api.Exists,
//				}
//			},
//		})
//	}
//
// The scenarios: the five tools on a started computer and an empty one
// after a restart; a create whose reply was lost (adopted by its attempt
// label, or an uncertain session for providers that cannot tag); a delete
// that fails and is retried until the machine is gone; refused
// credentials; a restart whose reconciliation keeps the running machine
// and removes a leftover; and credentials that never reach logs, API
// answers or the computer's environment.
package providertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/berthdev/berth/providers"
)

// T is what a scenario needs from a test; *testing.T has it all. The suite
// runs scenarios on a recording T of its own to check that it catches
// defective providers.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
	Context() context.Context
}

// Harness describes a provider to the suite.
type Harness struct {
	// ID is the provider id that connections name (default "test").
	ID string
	// New builds a fresh provider and its backend for one scenario. The
	// provider must log to log: everything logged there is searched for
	// credentials. New registers t.Cleanup functions that remove whatever
	// the backend still holds when the scenario ends.
	New func(t T, log *slog.Logger) Target
	// Untagged says the provider cannot tag its machines, so it cannot
	// find a create whose reply was lost: the session must become
	// uncertain instead of adopting the machine.
	Untagged bool
	// ReadyTimeout bounds the wait for a new computer's daemon (default
	// 60 s).
	ReadyTimeout time.Duration
	// Image is the image kind connections ask for (default headless).
	Image string
}

// Target is one provider under test with its backend.
type Target struct {
	Provider providers.Provider
	// Credentials are credentials the backend accepts, given with the
	// connection; nil for providers that take none (the suite then checks
	// that a connection with credentials is refused).
	Credentials map[string]string
	// Secrets are the values that must never be seen in logs, answers or
	// the computer's environment (default: every credential value of 8
	// characters or more).
	Secrets []string
	// Faults inject the backend's bad days. Providers that take
	// credentials must give them (the backend refuses credentials, not the
	// suite). When nil, the suite injects lost replies and failing deletes
	// at the provider's boundary (see Wrap), which suits a real backend
	// such as a Docker engine.
	Faults Faults
	// Exists reports whether the backend still holds a machine labelled
	// label=value (Berth's labels, or the provider's equivalent tags). It
	// asks the backend itself, not the provider.
	Exists func(ctx context.Context, label, value string) (bool, error)
}

// Faults are hooks into a provider's backend.
type Faults interface {
	// LoseNextCreateReply makes the next create succeed on the backend
	// and its reply be lost, as if the connection broke.
	LoseNextCreateReply()
	// FailNextDeletes makes the next n deletes fail on the backend.
	FailNextDeletes(n int)
	// RefuseCredentials makes the backend refuse every credential while
	// on is true.
	RefuseCredentials(on bool)
}

// Scenario is one check of the suite.
type Scenario struct {
	Name string
	Run  func(t T, h Harness)
}

// Scenarios returns the suite's scenarios, in the order Run runs them.
func Scenarios() []Scenario {
	return []Scenario{
		{"Tools", scenarioTools},
		{"LostCreateReply", scenarioLostCreateReply},
		{"FailingDelete", scenarioFailingDelete},
		{"BadCredentials", scenarioBadCredentials},
		{"Reconcile", scenarioReconcile},
		{"Secrets", scenarioSecrets},
	}
}

// Run runs every scenario as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("providertest: Harness.New is required")
	}
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) { sc.Run(t, h) })
	}
}
