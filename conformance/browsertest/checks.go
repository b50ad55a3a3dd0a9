package browsertest

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/providers"
)

// Conformance runs the conformance suite's scenarios that need no shell
// (a failing release retried until done, refused credentials) on the
// browser provider newTarget makes, and fails t if the suite no longer
// has them.
func Conformance(t *testing.T, id string, newTarget func(t *testing.T, log *slog.Logger) providertest.Target) {
	t.Helper()
	h := providertest.Harness{ID: id, New: func(pt providertest.T, log *slog.Logger) providertest.Target {
		return newTarget(pt.(*testing.T), log)
	}}
	ran := 0
	for _, sc := range providertest.Scenarios() {
		if sc.Name == "FailingDelete" || sc.Name == "BadCredentials" {
			ran++
			t.Run(sc.Name, func(t *testing.T) { sc.Run(t, h) })
		}
	}
	if ran != 2 {
		t.Errorf("ran %d of the suite's 2 scenarios without a shell: were they renamed?", ran)
	}
}

// Errors checks how p maps its API's answers: a refused key is
// providers.ErrBadCredentials and not repeated, a rate limit (which
// limitNext makes the fake answer to the next create) is
// providers.ErrCapacity, the release of an unknown session is done, and a
// foreign credential is refused. credName is the key's credential name.
func Errors(t *testing.T, p Session, checker providers.CredentialChecker, credName, key string, limitNext func()) {
	t.Helper()
	const wrong = "wrong_key_0123456789"
	spec := providers.Spec{ComputerID: "c", Lease: time.Minute, Credentials: map[string]string{credName: wrong}}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrBadCredentials) || strings.Contains(err.Error(), wrong) {
		t.Errorf("bad key: %v, want a refused key that is not repeated", err)
	}
	limitNext()
	spec.Credentials[credName] = key
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrCapacity) {
		t.Errorf("429: %v, want no room", err)
	}
	if err := p.Destroy(providers.WithCredentials(t.Context(), spec.Credentials), "gone"); err != nil {
		t.Errorf("release of an unknown session: %v", err)
	}
	if err := checker.CheckCredentials(map[string]string{credName: "k", "token": "x"}); err == nil {
		t.Errorf("CheckCredentials took a foreign credential")
	}
}
