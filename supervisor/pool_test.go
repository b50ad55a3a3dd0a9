package supervisor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/berthdev/berth/internal/testkit"

	"go.uber.org/goleak"

	"github.com/berthdev/berth/computerd/server"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testContext ends with the test, and after 30 s at most.
func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 30*time.Second)
}

// pooler is a provider whose computers are real computerd servers on
// loopback, with a warm pool; brokenBind makes its pool computers refuse
// every bind, as a computer whose daemon went wrong would.
type pooler struct {
	t          *testing.T
	size       int
	max        int // 0: size
	brokenBind bool

	mu        sync.Mutex
	servers   map[string]*httptest.Server
	cold      int
	destroyed []string
}

func (p *pooler) serve(id string, cfg server.Config, broken bool) providers.Machine {
	p.mu.Lock()
	defer p.mu.Unlock()
	cfg.Home, cfg.ComputerID = p.t.TempDir(), id
	var h http.Handler = server.New(cfg)
	if broken {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/bind" {
				http.Error(w, "broken", http.StatusInternalServerError)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	ts := httptest.NewServer(h)
	p.servers["m-"+id] = ts
	return providers.Machine{ID: "m-" + id, Endpoint: ts.URL}
}

func (p *pooler) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	p.mu.Lock()
	p.cold++
	p.mu.Unlock()
	return p.serve(spec.ComputerID, server.Config{TokenHash: spec.TokenHash}, false), nil
}

func (p *pooler) CreatePooled(ctx context.Context, spec providers.Spec, bindHash string) (providers.Machine, error) {
	return p.serve(spec.ComputerID, server.Config{BindHash: bindHash}, p.brokenBind), nil
}

func (p *pooler) Destroy(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ts, ok := p.servers[id]; ok {
		ts.Close()
		delete(p.servers, id)
		p.destroyed = append(p.destroyed, id)
	}
	return nil
}

var _ supervisor.Pooler = (*pooler)(nil)

func (p *pooler) PoolRange(image string) (int, int) {
	if image != providers.ImageHeadless {
		return 0, 0
	}
	return p.size, max(p.size, p.max)
}
func (p *pooler) UsesSupervisorEgress() bool       { return true }
func (p *pooler) MemInfo() (uint64, uint64, error) { return 50, 100, nil }

func (p *pooler) colds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cold
}

func (p *pooler) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ts := range p.servers {
		ts.Close()
	}
}

// poolEnv is a service on SQLite with p as its docker provider, its pool
// running until the test ends.
func poolEnv(t *testing.T, p *pooler) (*supervisor.Service, store.Store) {
	t.Helper()
	return poolService(t, p, p, nil)
}

// poolService is poolEnv with prov (which wraps p) as the docker provider;
// closing, if set, runs at the end after the pool has drained.
func poolService(t *testing.T, prov providers.Provider, p *pooler, closing func()) (*supervisor.Service, store.Store) {
	t.Helper()
	ctx := testContext(t)
	p.t, p.servers = t, map[string]*httptest.Server{}
	parts := supervisortest.NewParts(t, t.TempDir())
	st, box, tokens := parts.Store, parts.Box, parts.Tokens
	svc, err := supervisor.New(supervisor.Config{Store: st, Providers: map[string]providers.Provider{"docker": prov},
		Box: box, Tokens: tokens, EgressAddr: "10.0.0.1:3128"})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		svc.RunPool(pctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
		svc.DrainPool(context.Background())
		if closing != nil {
			closing()
		}
		p.closeAll()
		st.Close()
	})
	if _, err := svc.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: "a1", Name: "a1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Connect(ctx, supervisor.ConnectRequest{Agent: "a1"}); err != nil {
		t.Fatal(err)
	}
	return svc, st
}

// waitPool polls the pool's stats until waiting computers wait, within the
// test's time.
func waitPool(t *testing.T, svc *supervisor.Service, waiting int) {
	t.Helper()
	ctx := testContext(t)
	for svc.PoolStats().Waiting != waiting {
		select {
		case <-ctx.Done():
			t.Fatalf("pool: %+v, want %d waiting", svc.PoolStats(), waiting)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestPoolClaimAndBind: a start claims a waiting computer and binds it:
// the session's token works, the computer's environment carries its own
// egress credentials; the pool refills; a stop destroys the computer and
// forgets its record.
func TestPoolClaimAndBind(t *testing.T) {
	p := &pooler{size: 2}
	svc, st := poolEnv(t, p)
	ctx := testContext(t)
	waitPool(t, svc, 2)
	if _, err := svc.Start(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	x, err := st.LiveSession(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.PoolStats().Claimed; got != 1 || p.colds() != 0 || x.State != store.StateRunning {
		t.Fatalf("start: %d claimed, %d cold, state %s", got, p.colds(), x.State)
	}
	r, err := svc.Exec(ctx, "a1", supervisor.ExecRequest{Command: `printf %s "$HTTP_PROXY"`})
	if err != nil || !strings.HasPrefix(r.Stdout, "http://"+x.ComputerID+":") || !strings.HasSuffix(r.Stdout, "@10.0.0.1:3128") {
		t.Fatalf("exec on the bound computer: %+v %v", r, err)
	}
	if m, err := st.GetPoolMember(ctx, x.ComputerID); err != nil || m.State != store.PoolClaimed || m.SessionID != x.ID {
		t.Fatalf("pool record: %+v %v", m, err)
	}
	waitPool(t, svc, 2)
	if _, err := svc.Stop(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetPoolMember(ctx, x.ComputerID); err == nil {
		t.Error("the used computer's pool record outlived its session")
	}
	p.mu.Lock()
	destroyed := strings.Join(p.destroyed, ",")
	p.mu.Unlock()
	if destroyed != x.MachineID {
		t.Errorf("destroyed %q, want the session's computer %s", destroyed, x.MachineID)
	}
}

// TestPoolBindFailure: a pool computer that refuses its bind is destroyed,
// its session ends with no charge, and the start goes on cold.
func TestPoolBindFailure(t *testing.T) {
	p := &pooler{size: 1, brokenBind: true}
	svc, st := poolEnv(t, p)
	ctx := testContext(t)
	waitPool(t, svc, 1)
	v, err := svc.Start(ctx, "a1")
	if err != nil || v.State != store.StateRunning {
		t.Fatalf("start: %+v %v", v, err)
	}
	if n := p.colds(); n != 1 {
		t.Fatalf("%d cold creates, want 1 after the failed bind", n)
	}
	ended, err := st.SessionsByState(ctx, store.StateStopped)
	if err != nil || len(ended) != 1 || ended[0].ChargedSeconds != 0 || !strings.Contains(ended[0].LastError, "bind") {
		t.Fatalf("the failed bind's session: %+v %v", ended, err)
	}
	if _, err := svc.Exec(ctx, "a1", supervisor.ExecRequest{Command: "true"}); err != nil {
		t.Errorf("exec on the cold computer: %v", err)
	}
	if _, err := svc.Stop(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
}

// TestPoolFollowsDemand: a pool of 1 to 8 meets a burst of 8 concurrent
// starts with its one computer (most of the rest start cold), grows to the burst
// before the next one, which then starts entirely from the pool; no
// computer is given to two sessions, in the store's records as in the
// sessions.
func TestPoolFollowsDemand(t *testing.T) {
	p := &pooler{size: 1, max: 8}
	svc, st := poolEnv(t, p)
	ctx := testContext(t)
	agents := []string{"a1"}
	for i := 2; i <= 8; i++ {
		a := fmt.Sprintf("a%d", i)
		if _, err := svc.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: a, Name: a}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Connect(ctx, supervisor.ConnectRequest{Agent: a}); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	waitPool(t, svc, 1)
	burst := func() map[string]store.Session {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(agents))
		for _, a := range agents {
			wg.Go(func() {
				if _, err := svc.Start(ctx, a); err != nil {
					errs <- fmt.Errorf("start %s: %w", a, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := map[string]store.Session{}
		machines := map[string]string{}
		for _, a := range agents {
			x, err := st.LiveSession(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if other, ok := machines[x.MachineID]; ok {
				t.Fatalf("machine %s given to %s and %s", x.MachineID, other, a)
			}
			machines[x.MachineID] = a
			got[a] = x
		}
		return got
	}
	burst()
	// The pool's one computer and any it refilled during the burst were
	// claimed; the rest started cold.
	cold := p.colds()
	if fromPool := svc.PoolStats().Claimed; cold < 1 || int(fromPool)+cold != len(agents) {
		t.Fatalf("first burst: %d cold starts and %d from the pool, want at least 1 cold and %d in all", cold, fromPool, len(agents))
	}
	for _, a := range agents {
		if _, err := svc.Stop(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	waitPool(t, svc, 8)
	sessions := burst()
	if c := p.colds(); c != cold {
		t.Fatalf("second burst: %d cold starts in all, want still %d: every start from the pool", c, cold)
	}
	for a, x := range sessions {
		m, err := st.GetPoolMember(ctx, x.ComputerID)
		if err != nil || m.State != store.PoolClaimed || m.SessionID != x.ID {
			t.Errorf("%s: pool record %+v %v, want claimed by session %s", a, m, err, x.ID)
		}
	}
	if got := svc.PoolStats().Claimed; int(got) != 2*len(agents)-cold {
		t.Errorf("claimed %d from the pool, want %d", got, 2*len(agents)-cold)
	}
}
