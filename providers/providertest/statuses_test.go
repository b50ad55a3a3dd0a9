package providertest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/providertest"
)

// statusBackend hands the next status to a call that maps it with kind.
type statusBackend struct {
	next []int
	kind func(status int) error
	msg  string
}

func (b *statusBackend) FailNext(s ...int) { b.next = append(b.next, s...) }

func (b *statusBackend) call() error {
	s := b.next[0]
	b.next = b.next[1:]
	return fmt.Errorf("%w: answered %d %s", b.kind(s), s, b.msg)
}

func mapped(s int) error {
	switch s {
	case http.StatusTooManyRequests:
		return providers.ErrCapacity
	case http.StatusUnauthorized:
		return providers.ErrBadCredentials
	}
	return providers.ErrUnavailable
}

// TestCheckStatuses passes a provider that maps every status, and fails
// one that calls a refused key an outage and one whose errors hold the
// key.
func TestCheckStatuses(t *testing.T) {
	good := &statusBackend{kind: mapped}
	if r := runRecorded(t, func(rt providertest.T) { providertest.CheckStatuses(rt, good, good.call, "sk_secret") }); r.Failed() {
		t.Errorf("a right mapping failed: %s", r.firstFailure())
	}
	outage := &statusBackend{kind: func(int) error { return providers.ErrUnavailable }}
	if r := runRecorded(t, func(rt providertest.T) { providertest.CheckStatuses(rt, outage, outage.call) }); !r.Failed() {
		t.Error("every status answered as an outage passed")
	}
	leaky := &statusBackend{kind: mapped, msg: "for key sk_secret"}
	if r := runRecorded(t, func(rt providertest.T) { providertest.CheckStatuses(rt, leaky, leaky.call, "sk_secret") }); !r.Failed() {
		t.Error("errors holding the key passed")
	}
	exists := providertest.ExistsFunc(func(label, value string) bool { return label == "l" && value == "v" })
	if ok, err := exists(t.Context(), "l", "v"); !ok || err != nil {
		t.Errorf("ExistsFunc: %v %v", ok, err)
	}
	if ok, _ := exists(t.Context(), "l", "w"); ok {
		t.Error("ExistsFunc answered true for another value")
	}
}
