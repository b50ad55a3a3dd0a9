package local

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// world is a relay on loopback, with its internal API, that agents
// connect to with their tokens.
type world struct {
	t      *testing.T
	relay  *relayserver.Server
	srv    *httptest.Server
	in     *httptest.Server
	mu     sync.Mutex
	tokens map[string]string // token → agent id
}

const relayToken = "relay-token-0123456789"

func newWorld(t *testing.T) *world {
	w := &world{t: t, tokens: map[string]string{}}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	w.relay = relayserver.New(relayserver.Config{Logger: log, Authenticate: func(tok string) (string, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		id, ok := w.tokens[tok]
		return id, ok
	}})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, w.relay)
	w.srv = httptest.NewServer(mux)
	w.in = httptest.NewServer(w.relay.InternalHandler(relayToken))
	t.Cleanup(func() {
		w.relay.Close()
		w.srv.Close()
		w.in.Close()
	})
	return w
}

// agent is a lender connected to the relay as id; it stops when the
// returned function is called.
func (w *world) agent(id string, clk clock.Clock, set func(*control.Settings)) (*lender.Lender, func()) {
	t := w.t
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	led, err := ledger.OpenFile(ctx, filepath.Join(dir, ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lender.NewDockerEngine(docker.DefaultSocket)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	l, err := lender.New(lender.Config{LenderID: id, DataDir: dir, Ledger: led, Engine: eng, Clock: clk, Logger: log,
		Docker: func(float64, int64) (lender.Docker, error) { return docker.New(docker.Options{Logger: log}) }})
	if err != nil {
		t.Fatal(err)
	}
	s := lender.DefaultSettings()
	s.MemoryMB = 256
	if set != nil {
		set(&s)
	}
	if _, err := l.SetSettings(s); err != nil {
		t.Fatal(err)
	}
	tok := "agent-token-" + id
	w.mu.Lock()
	w.tokens[tok] = id
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Serve(ctx, relayclient.Config{URL: "ws" + strings.TrimPrefix(w.srv.URL, "http") + relay.ConnectPath, Token: tok, Logger: log})
	}()
	testkit.Eventually(t, 10*time.Second, "agent "+id+" to connect", func() bool {
		p, ok := w.relay.Presence(id)
		return ok && p.Online
	})
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		l.Close()
		eng.Close()
		led.Close()
		testkit.Eventually(t, 10*time.Second, "agent "+id+" offline", func() bool {
			p, _ := w.relay.Presence(id)
			return !p.Online
		})
	}
	t.Cleanup(stop)
	return l, stop
}

func spec(creds map[string]string) providers.Spec {
	return providers.Spec{ComputerID: "c1", SessionID: "s1", AttemptID: "a1", Deployment: "dep", AgentID: "agent-1",
		Image: "headless", TokenHash: token.Hash("t"), Lease: 10 * time.Minute, Credentials: creds}
}

func wantRefused(t *testing.T, err error, status int, code, msg string) {
	t.Helper()
	var re *providers.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, providers.ErrRefused) || re.Status != status || re.Code != code || !strings.Contains(re.Message, msg) {
		t.Fatalf("create: %v, want refused %d %s containing %q", err, status, code, msg)
	}
}

// TestErrors checks what the supervisor is told, through the relay in this
// process and through a relay's internal API: an offline lender (503, with
// its last-seen time once it was seen), lending paused (503), the owner's
// limits (422), approval denied (403) and timed out (503), and the choice
// of a lender when the connection names none.
func TestErrors(t *testing.T) {
	w := newWorld(t)
	remote, err := relayserver.NewRemote(w.in.URL, relayToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name  string
		relay Relay
	}{{"in-process", InProcess(w.relay)}, {"remote", remote}} {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			p, err := New(Options{Relay: r.relay, MemoryMB: 4096})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Create(ctx, spec(map[string]string{CredLender: "cp_ghost"}))
			wantRefused(t, err, 503, CodeLenderOffline, "lender cp_ghost is offline: its agent has not connected")

			_, stop := w.agent("cp_big_"+r.name, nil, nil)
			_, err = p.Create(ctx, spec(map[string]string{CredLender: "cp_big_" + r.name}))
			wantRefused(t, err, 422, lending.CodeMemory, "memoryMB: 4096 asked, the owner allows at most 256 MB per computer")
			stop()
			_, err = p.Create(ctx, spec(map[string]string{CredLender: "cp_big_" + r.name}))
			wantRefused(t, err, 503, CodeLenderOffline, "its link to the relay dropped; last seen 20")
		})
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, _ := New(Options{Relay: InProcess(w.relay)})
	// Both lenders of the subtests were seen and are offline: which one?
	_, err = p.Create(ctx, spec(nil))
	wantRefused(t, err, 422, CodeWhichLender, "credentials.lender: 2 lenders have connected to the relay")

	_, _ = w.agent("cp_paused", nil, func(s *control.Settings) { s.Lending = false })
	_, err = p.Create(ctx, spec(map[string]string{CredLender: "cp_paused"}))
	wantRefused(t, err, 503, lending.CodePaused, "lender cp_paused: lending is paused by the machine's owner")

	_, _ = w.agent("cp_nodesk", nil, func(s *control.Settings) { s.Desktop = false })
	sp := spec(map[string]string{CredLender: "cp_nodesk"})
	sp.Image = providers.ImageDesktop
	_, err = p.Create(ctx, sp)
	wantRefused(t, err, 422, lending.CodeDesktop, "allows no desktop computers")

	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	la, _ := w.agent("cp_asks", clk, func(s *control.Settings) { s.Approval, s.ApprovalTimeoutSeconds = true, 60 })
	errc := make(chan error, 1)
	decide := func(f func(control.Approval)) {
		var as []control.Approval
		testkit.EventuallyContext(t, ctx, "one approval asked", func() bool { as = la.Approvals(); return len(as) == 1 })
		f(as[0])
	}
	go func() { _, err := p.Create(ctx, spec(map[string]string{CredLender: "cp_asks"})); errc <- err }()
	decide(func(a control.Approval) { la.Decide(a.ID, false) })
	wantRefused(t, <-errc, 403, lending.CodeDenied, "the machine's owner denied the session")
	go func() { _, err := p.Create(ctx, spec(map[string]string{CredLender: "cp_asks"})); errc <- err }()
	decide(func(control.Approval) { clk.Advance(time.Minute) })
	wantRefused(t, <-errc, 503, lending.CodeApprovalTimeout, "did not approve the session within 60 s")

	// Listing: an offline lender is an error, an online one lists what it runs.
	if _, err := p.List(providers.WithCredentials(ctx, map[string]string{CredLender: "cp_ghost"})); err == nil {
		t.Fatal("list of an offline lender succeeded")
	}
	if ms, err := p.List(providers.WithCredentials(ctx, map[string]string{CredLender: "cp_asks"})); err != nil || len(ms) != 0 {
		t.Fatalf("list: %+v %v", ms, err)
	}
	if _, err := p.List(ctx); err == nil {
		t.Fatal("list with no lender named among several succeeded")
	}

	if err := p.CheckCredentials(map[string]string{"apiKey": "x"}); err == nil || !strings.Contains(err.Error(), `the only one is "lender"`) {
		t.Fatalf("check credentials: %v", err)
	}
	if err := p.CheckCredentials(map[string]string{CredLender: "cp bad"}); err == nil {
		t.Fatal("a lender id with a space was accepted")
	}
	if err := p.Destroy(ctx, "no-slash"); err == nil {
		t.Fatal("destroy of a malformed machine id succeeded")
	}
}

// TestRemoteNeedsToken: the relay's internal API refuses a wrong token.
func TestRemoteNeedsToken(t *testing.T) {
	w := newWorld(t)
	r, err := relayserver.NewRemote(w.in.URL, "wrong-token-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lenders(t.Context()); err == nil || !strings.Contains(err.Error(), "refused RELAY_TOKEN") {
		t.Fatalf("agents with a wrong token: %v", err)
	}
	if _, err := relayserver.NewRemote(w.in.URL, "short", nil); err == nil {
		t.Fatal("a short token was accepted")
	}
}
