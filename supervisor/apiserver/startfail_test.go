package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
	"github.com/berthdev/berth/supervisor/supervisortest"
)

// answer is one raw answer of the API.
type answer struct {
	status   int
	replayed bool
	body     []byte
	code     string
	state    string // of a session answer
}

// post sends a start without failing the test, so that goroutines may use
// it; key is sent as the Idempotency-Key when set.
func (e *env) post(ctx context.Context, path, key string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+path, nil)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+opToken)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get(apiserver.HeaderReplayed) == "true"}
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		return a, err
	}
	var v struct {
		State string `json:"state"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.body, &v); err != nil {
		return a, fmt.Errorf("answer %d %s: %w", a.status, a.body, err)
	}
	if a.status >= 400 && (v.Error.Code == "" || v.Error.Message == "") {
		return a, fmt.Errorf("answer %d without an error envelope: %s", a.status, a.body)
	}
	a.code, a.state = v.Error.Code, v.State
	return a, nil
}

// awaitStarting waits until the agent's session is starting (its create
// is under way).
func (e *env) awaitStarting(ctx context.Context, agent string) {
	e.t.Helper()
	for {
		x, err := e.st.LiveSession(ctx, agent)
		if err == nil && x.State == store.StateStarting {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("no starting session of %s: %v", agent, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// startsDuring sends one start, waits until its create is under way, then
// sends n-1 more that find the session starting; once all of them have
// joined the first, it lets the create held at gate go on. It returns
// every answer, the first one's first.
func (e *env) startsDuring(ctx context.Context, agent string, n int, joins *supervisortest.Joins, gate chan struct{}) []answer {
	e.t.Helper()
	path := "/v1/agents/" + agent + "/computer/start"
	out := make([]answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	release := sync.OnceFunc(func() { close(gate) })
	defer release()
	wg.Add(1)
	go func() {
		defer wg.Done()
		out[0], errs[0] = e.post(ctx, path, "")
	}()
	e.awaitStarting(ctx, agent)
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = e.post(ctx, path, "")
		}()
	}
	testkit.EventuallyContext(e.t, ctx, fmt.Sprintf("%d starts to join the first", n-1), func() bool { return joins.Count() >= n-1 })
	release()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// newJoinsEnv is newEnv on a store that counts the requests that joined
// another's work.
func newJoinsEnv(t *testing.T) (*env, *supervisortest.Joins) {
	t.Helper()
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	joins := supervisortest.CountJoins(st)
	return newEnvWith(t, joins), joins
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A start whose create failed, and every start that waited on that create,
// answers the failure: never a 200 with a stopped session.
func TestFailedCreateFailsEveryWaitingStart(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		status   int
		code     string
		waitStat int // what the starts that waited answer, when it differs
	}{
		{"capacity", providers.ErrCapacity, 503, supervisor.CodeUnavailable, 0},
		{"bad image", providers.ErrBadImage, 502, supervisor.CodeProvider, 0},
		{"bad credentials", providers.ErrBadCredentials, 502, supervisor.CodeProvider, 0},
		{"refused", &providers.RefusedError{Status: 422, Code: "over_limit", Message: "over the owner's limit"}, 422, "over_limit", 0},
		// A create whose outcome is unknown leaves the session uncertain
		// (SPEC 3): the create's start says so with 502, the others with 409.
		{"lost reply", errors.New("reset by peer"), 502, supervisor.CodeUncertain, 409},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, joins := newJoinsEnv(t)
			e.connect("a1", 300, 3600)
			gate := make(chan struct{})
			e.fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: tt.err, CreateGate: gate})
			const n = 6
			for i, a := range e.startsDuring(testCtx(t), "a1", n, joins, gate) {
				want := tt.status
				if i > 0 && tt.waitStat != 0 {
					want = tt.waitStat
				}
				if a.status != want || a.code != tt.code {
					t.Errorf("start %d answered %d %q (state %q), want %d %s: %s", i, a.status, a.code, a.state, want, tt.code, a.body)
				}
			}
			if c, _ := e.fake.Counts(); c != 1 {
				t.Fatalf("creates = %d, want 1: the starts must wait on the first create", c)
			}
			if tt.code == supervisor.CodeUncertain {
				return // a person confirms first; TestUncertainCreate goes on
			}
			var st supervisor.StatusView
			e.mustCall("GET", "/v1/agents/a1/computer", nil, 200, &st)
			if st.Session != nil || st.Budget.LeftSeconds != 3600 {
				t.Fatalf("after the failed create: session %+v, budget %+v", st.Session, st.Budget)
			}
			// A fresh start tries again.
			e.fake.SetFaults(fake.Faults{})
			var s supervisor.SessionView
			e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, &s)
			if s.State != store.StateRunning {
				t.Fatalf("start after the failure: %+v", s)
			}
		})
	}
}

// A start retried with its Idempotency-Key after its create failed answers
// the same failure, also while the first is still creating; a start with a
// new key tries again.
func TestFailedCreateReplaysWithItsKey(t *testing.T) {
	e, joins := newJoinsEnv(t)
	e.connect("a1", 300, 3600)
	ctx := testCtx(t)
	const path = "/v1/agents/a1/computer/start"
	answers := make([]answer, 4)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	defer wg.Wait()
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	defer release() // before the wait above, should the test end early
	e.fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: providers.ErrCapacity, CreateGate: gate})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = e.post(ctx, path, "k1")
		}()
		if i == 0 {
			e.awaitStarting(ctx, "a1")
		}
	}
	// The retries with k1 wait on the first start's record.
	testkit.EventuallyContext(t, ctx, "the retries to find the first start's record", func() bool { return joins.Count() >= len(answers)-1 })
	release()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	later, err := e.post(ctx, path, "k1")
	if err != nil {
		t.Fatal(err)
	}
	answers = append(answers, later)
	for i, a := range answers {
		if a.status != 503 || a.code != supervisor.CodeUnavailable || a.replayed != (i > 0) {
			t.Errorf("start %d with key k1: %d %q replayed=%v: %s", i, a.status, a.code, a.replayed, a.body)
		}
	}
	if c, _ := e.fake.Counts(); c != 1 {
		t.Fatalf("creates = %d, want 1", c)
	}
	e.fake.SetFaults(fake.Faults{})
	a, err := e.post(ctx, path, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != 200 || a.state != store.StateRunning {
		t.Fatalf("start with a new key: %d %s", a.status, a.body)
	}
	if c, _ := e.fake.Counts(); c != 2 {
		t.Fatalf("creates = %d, want 2", c)
	}
}
