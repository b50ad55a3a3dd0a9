package providertest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// fakeExists answers Exists from the fake's own machines: the fake is its
// own backend.
func fakeExists(p *fake.Provider) func(ctx context.Context, label, value string) (bool, error) {
	return func(ctx context.Context, label, value string) (bool, error) {
		ms, err := p.List(ctx)
		if err != nil {
			return false, err
		}
		for _, m := range ms {
			if m.Labels[label] == value {
				return true, nil
			}
		}
		return false, nil
	}
}

// fakeFaults drives the fake's own fault injection.
type fakeFaults struct{ p *fake.Provider }

func (f fakeFaults) LoseNextCreateReply() {
	f.p.UpdateFaults(func(x *fake.Faults) { x.LoseCreateReplies++ })
}
func (f fakeFaults) FailNextDeletes(n int) {
	f.p.UpdateFaults(func(x *fake.Faults) { x.FailDestroys += n })
}
func (f fakeFaults) RefuseCredentials(on bool) {}

// TestFake runs the suite against providers/fake.
func TestFake(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		ID: fake.ID,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			p := fake.New(t.TempDir(), log)
			t.Cleanup(p.Close)
			return providertest.Target{Provider: p, Faults: fakeFaults{p}, Exists: fakeExists(p)}
		},
	})
}

// TestFakeWrapped runs the suite against providers/fake with the faults
// injected at its boundary, as for a real backend.
func TestFakeWrapped(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			p := fake.New(t.TempDir(), log)
			t.Cleanup(p.Close)
			return providertest.Target{Provider: p, Exists: fakeExists(p)}
		},
	})
}

// Defects a keyed provider can be built with, one per scenario it breaks.
type defect int

const (
	sound             defect = iota
	destroyNoop              // Destroy answers success and leaves the machine
	unlabelledList           // List drops Berth's labels
	swallowDelete            // Destroy hides the backend's failure
	refusalAsOutage          // refused credentials reported as an outage
	logsKey                  // the apiKey is logged
	keyInEnvironment         // the apiKey is put in the computer's environment
	noDeploymentLabel        // List drops the deployment label
)

// keyed is a provider that takes an apiKey, built on providers/fake: the
// fake is its backend, which refuses any other key.
type keyed struct {
	fake   *fake.Provider
	key    string
	defect defect
	log    *slog.Logger

	mu     sync.Mutex
	refuse bool
}

func (k *keyed) CheckCredentials(c map[string]string) error {
	if c["apiKey"] == "" {
		return errors.New("apiKey is missing")
	}
	return nil
}

func (k *keyed) authorized(c map[string]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.refuse || c["apiKey"] != k.key {
		if k.defect == refusalAsOutage {
			return providers.ErrUnavailable
		}
		return providers.ErrBadCredentials
	}
	return nil
}

func (k *keyed) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	if k.defect == logsKey {
		k.log.Info("creating", "key", spec.Credentials["apiKey"])
	}
	if err := k.authorized(spec.Credentials); err != nil {
		return providers.Machine{}, fmt.Errorf("keyed create: %w", err)
	}
	if k.defect == keyInEnvironment {
		env := map[string]string{"KEYED_API_KEY": spec.Credentials["apiKey"]}
		for n, v := range spec.Env {
			env[n] = v
		}
		spec.Env = env
	}
	return k.fake.Create(ctx, spec)
}

func (k *keyed) Destroy(ctx context.Context, id string) error {
	if err := k.authorized(providers.CredentialsFrom(ctx)); err != nil {
		return fmt.Errorf("keyed destroy: %w", err)
	}
	switch k.defect {
	case destroyNoop:
		return nil
	case swallowDelete:
		k.fake.Destroy(ctx, id)
		return nil
	}
	return k.fake.Destroy(ctx, id)
}

func (k *keyed) List(ctx context.Context) ([]providers.Machine, error) {
	if err := k.authorized(providers.CredentialsFrom(ctx)); err != nil {
		return nil, fmt.Errorf("keyed list: %w", err)
	}
	ms, err := k.fake.List(ctx)
	for i := range ms {
		switch k.defect {
		case unlabelledList:
			ms[i].Labels = nil
		case noDeploymentLabel:
			l := maps.Clone(ms[i].Labels)
			delete(l, providers.LabelDeployment)
			ms[i].Labels = l
		}
	}
	return ms, err
}

func (k *keyed) LoseNextCreateReply()  { fakeFaults{k.fake}.LoseNextCreateReply() }
func (k *keyed) FailNextDeletes(n int) { fakeFaults{k.fake}.FailNextDeletes(n) }
func (k *keyed) RefuseCredentials(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refuse = on
}

func keyedHarness(d defect) providertest.Harness {
	return providertest.Harness{
		ID: "keyed",
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			f := fake.New(t.TempDir(), log)
			t.Cleanup(f.Close)
			key := fmt.Sprintf("keyed-secret-%d", time.Now().UnixNano())
			k := &keyed{fake: f, key: key, defect: d, log: log}
			return providertest.Target{
				Provider:    k,
				Credentials: map[string]string{"apiKey": key},
				Faults:      k,
				Exists:      fakeExists(f),
			}
		},
	}
}

// TestKeyed runs the suite against a sound provider that takes
// credentials and needs them in Destroy and List.
func TestKeyed(t *testing.T) {
	providertest.Run(t, keyedHarness(sound))
}

// TestSuiteCatchesDefects runs scenarios against providers with one defect
// each and checks that the scenario meant to catch it fails.
func TestSuiteCatchesDefects(t *testing.T) {
	scenarios := map[string]providertest.Scenario{}
	for _, sc := range providertest.Scenarios() {
		scenarios[sc.Name] = sc
	}
	cases := []struct {
		name     string
		d        defect
		scenario string
	}{
		{"DestroyLeavesMachine", destroyNoop, "Tools"},
		{"ListWithoutLabels", unlabelledList, "LostCreateReply"},
		{"DeleteFailureHidden", swallowDelete, "FailingDelete"},
		{"RefusalReportedAsOutage", refusalAsOutage, "BadCredentials"},
		{"KeyLogged", logsKey, "Secrets"},
		{"KeyInEnvironment", keyInEnvironment, "Secrets"},
		{"ListWithoutDeployment", noDeploymentLabel, "Reconcile"},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.scenario] = true
	}
	for name := range scenarios {
		if !covered[name] {
			t.Errorf("no defective provider is run against scenario %s", name)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, ok := scenarios[c.scenario]
			if !ok {
				t.Fatalf("no scenario %s", c.scenario)
			}
			r := runRecorded(t, func(rt providertest.T) { sc.Run(rt, keyedHarness(c.d)) })
			if !r.Failed() {
				t.Errorf("scenario %s passed a provider whose defect is %s", c.scenario, c.name)
			} else {
				t.Logf("caught: %s", r.firstFailure())
			}
		})
	}
	// The wrong-credentials path of a provider that takes none.
	t.Run("CredentialsAcceptedWithoutChecker", func(t *testing.T) {
		r := runRecorded(t, func(rt providertest.T) {
			scenarios["BadCredentials"].Run(rt, providertest.Harness{New: func(t providertest.T, log *slog.Logger) providertest.Target {
				f := fake.New(t.TempDir(), log)
				t.Cleanup(f.Close)
				return providertest.Target{Provider: acceptsAnything{f}, Faults: fakeFaults{f}, Exists: fakeExists(f)}
			}})
		})
		if !r.Failed() {
			t.Error("BadCredentials passed a provider without credentials that accepts any")
		}
	})
}

// acceptsAnything takes no credentials yet claims to check them.
type acceptsAnything struct{ *fake.Provider }

func (acceptsAnything) CheckCredentials(map[string]string) error { return nil }

// recorder is a providertest.T that records failures instead of failing
// the test that runs it.
type recorder struct {
	parent *testing.T
	ctx    context.Context

	mu       sync.Mutex
	failures []string
	cleanups []func()
}

// runRecorded runs fn on a recorder, as a test would: a Fatalf ends fn,
// cleanups run after it in reverse order.
func runRecorded(t *testing.T, fn func(providertest.T)) *recorder {
	r := &recorder{parent: t, ctx: t.Context()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(r.cleanups) - 1; i >= 0; i-- {
				r.cleanups[i]()
			}
		}()
		fn(r)
	}()
	<-done
	return r
}

func (r *recorder) Helper()                  {}
func (r *recorder) Name() string             { return r.parent.Name() }
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Logf(format string, args ...any) {
	// Kept quiet: the parent logs the first failure.
}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) > 0
}
func (r *recorder) firstFailure() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) == 0 {
		return ""
	}
	return strings.SplitN(r.failures[0], "\n", 2)[0]
}
func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}
func (r *recorder) TempDir() string {
	d, err := os.MkdirTemp("", "providertest-")
	if err != nil {
		r.Fatalf("temp dir: %v", err)
	}
	r.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// untagged is providers/fake without its Lister: a provider that cannot
// search for its machines.
type untagged struct{ p *fake.Provider }

func (u untagged) Create(ctx context.Context, s providers.Spec) (providers.Machine, error) {
	return u.p.Create(ctx, s)
}
func (u untagged) Destroy(ctx context.Context, id string) error { return u.p.Destroy(ctx, id) }

// TestUntagged runs the suite for a provider that cannot tag: a lost
// create reply must leave the session uncertain.
func TestUntagged(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Untagged: true,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			p := fake.New(t.TempDir(), log)
			t.Cleanup(p.Close)
			return providertest.Target{Provider: untagged{p}, Faults: fakeFaults{p}, Exists: fakeExists(p)}
		},
	})
}
