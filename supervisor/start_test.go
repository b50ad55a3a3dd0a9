package supervisor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// heldBind is a pooler whose pool computers refuse their bind, each bind
// held until release is closed; binding is closed when the first arrives.
type heldBind struct {
	*pooler
	release chan struct{}
	binding chan struct{}
	once    sync.Once

	mu      sync.Mutex
	proxies []*httptest.Server
}

func (p *heldBind) CreatePooled(ctx context.Context, spec providers.Spec, bindHash string) (providers.Machine, error) {
	m, err := p.pooler.CreatePooled(ctx, spec, bindHash)
	if err != nil {
		return m, err
	}
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		return m, err
	}
	next := httputil.NewSingleHostReverseProxy(u)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/bind" {
			p.once.Do(func() { close(p.binding) })
			<-p.release
		}
		next.ServeHTTP(w, r)
	}))
	p.mu.Lock()
	p.proxies = append(p.proxies, ts)
	p.mu.Unlock()
	m.Endpoint = ts.URL
	return m, nil
}

func (p *heldBind) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ts := range p.proxies {
		ts.Close()
	}
}

// TestStartWaitingOnFailedBindGoesOn: a start that waited on a start whose
// pool computer refused its bind does not answer that ended session: it
// answers the running computer that the start went on to make.
func TestStartWaitingOnFailedBindGoesOn(t *testing.T) {
	ctx := testContext(t)
	p := &heldBind{pooler: &pooler{size: 1, brokenBind: true}, release: make(chan struct{}), binding: make(chan struct{})}
	svc, st := poolService(t, p, p.pooler, p.close)
	waitPool(t, svc, 1)

	type result struct {
		v   supervisor.SessionView
		err error
	}
	results := make(chan result, 2)
	start := func() {
		v, err := svc.Start(ctx, "a1")
		results <- result{v, err}
	}
	go start()
	select {
	case <-p.binding:
	case <-ctx.Done():
		t.Fatal("the start did not bind a pool computer")
	}
	if x, err := st.LiveSession(ctx, "a1"); err != nil || x.State != store.StateStarting {
		t.Fatalf("while binding: %+v %v", x, err)
	}
	go start()
	time.Sleep(100 * time.Millisecond) // the second start finds the first starting
	close(p.release)
	var ids []string
	for range 2 {
		r := <-results
		if r.err != nil || r.v.State != store.StateRunning {
			t.Fatalf("start: %+v %v", r.v, r.err)
		}
		ids = append(ids, r.v.ID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("the starts answered sessions %v, want one", ids)
	}
}
