package providertest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
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

// TestCheckCreated passes a machine made right and fails one that keeps
// the egress proxy, one that lacks a label and one that holds the key.
func TestCheckCreated(t *testing.T) {
	spec := providers.Spec{ComputerID: "c1", SessionID: "s_c1", AttemptID: "a_1", AgentID: "ag", Deployment: "d_1",
		TokenHash: "h", Env: map[string]string{"A": "b", "HTTP_PROXY": "http://c1:pw@proxy:3128"},
		Credentials: map[string]string{"apiKey": "sk_0123456789"}}
	good := func() (map[string]string, map[string]string) {
		return spec.Labels(), map[string]string{"A": "b", computerd.EnvTokenHash: "h", computerd.EnvComputerID: "c1"}
	}
	labels, env := good()
	if r := runRecorded(t, func(rt providertest.T) { providertest.CheckCreated(rt, spec, labels, env) }); r.Failed() {
		t.Errorf("a machine made right failed: %s", r.firstFailure())
	}
	for name, spoil := range map[string]func(l, e map[string]string){
		"egress proxy kept": func(_, e map[string]string) { e["HTTP_PROXY"] = spec.Env["HTTP_PROXY"] },
		"label missing":     func(l, _ map[string]string) { delete(l, providers.LabelAttempt) },
		"key in the env":    func(_, e map[string]string) { e["KEY"] = "x sk_0123456789" },
		"variable lost":     func(_, e map[string]string) { delete(e, "A") },
		"token hash wrong":  func(_, e map[string]string) { e[computerd.EnvTokenHash] = "other" },
	} {
		labels, env := good()
		spoil(labels, env)
		if r := runRecorded(t, func(rt providertest.T) { providertest.CheckCreated(rt, spec, labels, env) }); !r.Failed() {
			t.Errorf("%s passed", name)
		}
	}
}

// TestCreateOne returns the one machine a create made, and fails when
// the backend holds another.
func TestCreateOne(t *testing.T) {
	p := fake.New(t.TempDir(), nil)
	defer p.Close()
	spec := providers.Spec{ComputerID: "c1", SessionID: "s_c1", AttemptID: "a_1", TokenHash: "h"}
	list := func() []providers.Machine { ms, _ := p.List(t.Context()); return ms }
	var m, held providers.Machine
	if r := runRecorded(t, func(rt providertest.T) { m, held = providertest.CreateOne(rt, p, spec, list) }); r.Failed() || m.ID == "" || held.ID != m.ID {
		t.Errorf("first create: %s, %+v %+v", r.firstFailure(), m, held)
	}
	spec.ComputerID, spec.SessionID, spec.AttemptID = "c2", "s_c2", "a_2"
	if r := runRecorded(t, func(rt providertest.T) { providertest.CreateOne(rt, p, spec, list) }); !r.Failed() {
		t.Error("a second machine on the backend passed")
	}
}
