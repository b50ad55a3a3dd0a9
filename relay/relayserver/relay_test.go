package relayserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

func echoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.Method, r.URL.Path)
	})
}

func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

func TestFullPath(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	log, _ := newLogger(t)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
	startAgent(t, relayclient.Config{URL: r.url, Token: "good-token-1", Handler: echoHandler("one"), Logger: log, Version: "1.2.3"})
	startAgent(t, relayclient.Config{URL: r.url, Token: "good-token-2", Handler: echoHandler("two"), Logger: log, Version: "1.2.4"})
	testkit.EventuallyContext(t, ctx, "agents online", func() bool { return online(r, "agent-1")() && online(r, "agent-2")() })

	for _, tc := range []struct{ id, want string }{
		{"agent-1", "one GET /v1/computers"},
		{"agent-2", "two GET /v1/computers"},
	} {
		c := &http.Client{Transport: r.Transport(tc.id)}
		for range 3 { // reuses the kept-alive stream
			got, err := get(ctx, c, "http://agent/v1/computers")
			if err != nil {
				t.Fatalf("%s: %v", tc.id, err)
			}
			if got != tc.want {
				t.Fatalf("%s: got %q, want %q", tc.id, got, tc.want)
			}
		}
	}
	if p, _ := r.Presence("agent-2"); p.Version != "1.2.4" {
		t.Fatalf("version %q", p.Version)
	}
	if got := len(r.Lenders()); got != 2 {
		t.Fatalf("Agents() has %d entries", got)
	}
}

func TestWrongTokenRefused(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	log, logs := newLogger(t)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
	const secret = "wrong-token-s3cr3t"
	_, err := relayclient.Connect(ctx, relayclient.Config{URL: r.url, Token: secret})
	if !errors.Is(err, relayclient.ErrUnauthorized) {
		t.Fatalf("Connect with a wrong token: %v", err)
	}
	_, err = relayclient.Connect(ctx, relayclient.Config{URL: r.url})
	if !errors.Is(err, relayclient.ErrUnauthorized) {
		t.Fatalf("Connect with no token: %v", err)
	}
	out := logs.String()
	if strings.Contains(out, secret) {
		t.Fatalf("log contains the token:\n%s", out)
	}
	if !strings.Contains(out, "invalid token") {
		t.Fatalf("log does not record the refusal:\n%s", out)
	}
	if n := len(r.Lenders()); n != 0 {
		t.Fatalf("%d agents registered", n)
	}
}

func TestRelayKilledMidSession(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	log, _ := newLogger(t)
	entered := make(chan struct{}, 1)
	h := http.NewServeMux()
	h.Handle("/", echoHandler("one"))
	h.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done() // holds the request until the link dies
	})
	r1 := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
	addr := r1.addr()
	connects := make(chan struct{}, 4)
	startAgent(t, relayclient.Config{
		URL: r1.url, Token: "good-token-1", Handler: h, Logger: log, Backoff: fastBackoff(),
		OnConnect: func() { connects <- struct{}{} },
	})
	testkit.EventuallyContext(t, ctx, "agent online", online(r1, "agent-1"))
	<-connects

	c1 := &http.Client{Transport: r1.Transport("agent-1")}
	inflight := make(chan error, 1)
	go func() {
		_, err := get(ctx, c1, "http://agent/slow")
		inflight <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("request never reached the agent")
	}

	r1.stop() // the relay dies: listener and every connection cut

	select {
	case err := <-inflight:
		if err == nil {
			t.Fatal("in-flight request succeeded across a dead relay")
		}
		t.Logf("in-flight request failed as expected: %v", err)
	case <-ctx.Done():
		t.Fatal("in-flight request hung after the relay died")
	}

	r2 := startRelay(t, addr, relayserver.Config{Logger: log})
	testkit.EventuallyContext(t, ctx, "agent back online", online(r2, "agent-1"))
	select {
	case <-connects:
	case <-ctx.Done():
		t.Fatal("no reconnect")
	}
	got, err := get(ctx, &http.Client{Transport: r2.Transport("agent-1")}, "http://agent/after")
	if err != nil || got != "one GET /after" {
		t.Fatalf("after reconnect: %q, %v", got, err)
	}
}

func TestPresence(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	log, _ := newLogger(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	var reports []relayserver.Presence
	reported := make(chan relayserver.Presence, 8)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{
		Logger: log, Clock: clk, PingInterval: time.Second,
		OnPresence: func(p relayserver.Presence) { reported <- p },
	})

	// Unknown agent.
	if _, ok := r.Presence("agent-1"); ok {
		t.Fatal("unknown agent has presence")
	}
	_, err := r.Dial(ctx, "agent-1")
	var off *relayserver.OfflineError
	if !errors.Is(err, relayserver.ErrLenderOffline) || !errors.As(err, &off) || !off.LastSeen.IsZero() {
		t.Fatalf("dial unknown agent: %v", err)
	}

	agentCtx, stopAgent := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- relayclient.Run(agentCtx, relayclient.Config{URL: r.url, Token: "good-token-1", Handler: echoHandler("one"), Logger: log, Version: "9.9.9"})
	}()
	testkit.EventuallyContext(t, ctx, "agent online", online(r, "agent-1"))
	p, _ := r.Presence("agent-1")
	if !p.Online || !p.ConnectedAt.Equal(start) || !p.LastSeen.Equal(start) || p.Version != "9.9.9" {
		t.Fatalf("presence after connect: %+v", p)
	}

	// Answered pings move last seen with the clock.
	testkit.EventuallyContext(t, ctx, "a ping to move last seen", func() bool {
		clk.Advance(time.Second)
		p, _ := r.Presence("agent-1")
		return p.LastSeen.After(start)
	})

	stopAgent()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	testkit.EventuallyContext(t, ctx, "agent offline", func() bool { return !online(r, "agent-1")() })
	clk.Advance(time.Hour) // offline time passes; last seen stays
	p, _ = r.Presence("agent-1")
	if p.Online || p.LastSeen.Before(start.Add(time.Second)) || p.LastSeen.After(start.Add(time.Hour)) {
		t.Fatalf("presence after disconnect: %+v", p)
	}
	_, err = r.Dial(ctx, "agent-1")
	if !errors.Is(err, relayserver.ErrLenderOffline) || !errors.As(err, &off) || !off.LastSeen.Equal(p.LastSeen) {
		t.Fatalf("dial offline agent: %v", err)
	}
	if !strings.Contains(err.Error(), "last seen") {
		t.Fatalf("error does not say when the agent was last seen: %v", err)
	}
	_, err = get(ctx, &http.Client{Transport: r.Transport("agent-1")}, "http://agent/x")
	if !errors.Is(err, relayserver.ErrLenderOffline) {
		t.Fatalf("request to offline agent: %v", err)
	}

	for len(reported) > 0 {
		reports = append(reports, <-reported)
	}
	if len(reports) != 2 || !reports[0].Online || reports[1].Online {
		t.Fatalf("presence reports: %+v", reports)
	}
}

// A second link with the same token does not replace a live first one:
// the newcomer is closed with CloseReasonDuplicate.
func TestSecondLinkRefusedWhileFirstLive(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	log, _ := newLogger(t)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
	s1, err := relayclient.Connect(ctx, relayclient.Config{URL: r.url, Token: "good-token-1", Version: "first"})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	testkit.EventuallyContext(t, ctx, "first online", online(r, "agent-1"))

	ws, _, err := websocket.Dial(ctx, r.url, &websocket.DialOptions{
		Subprotocols: []string{relay.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer good-token-1"}, relay.VersionHeader: {"second"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	_, _, err = ws.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != relayserver.CloseReasonDuplicate {
		t.Fatalf("second link: %v, want close %d %q", err, websocket.StatusPolicyViolation, relayserver.CloseReasonDuplicate)
	}
	if s1.IsClosed() {
		t.Fatal("the first link was closed")
	}
	if p, _ := r.Presence("agent-1"); !p.Online || p.Version != "first" {
		t.Fatalf("presence: %+v", p)
	}
	go func() {
		if st, err := s1.Accept(); err == nil {
			st.Write([]byte("hi"))
			st.Close()
		}
	}()
	c, err := r.Dial(ctx, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// A link that is gone is replaced by the next one at once.
func TestLinkAfterCloseAccepted(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	log, _ := newLogger(t)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
	cfg := relayclient.Config{URL: r.url, Token: "good-token-1", Version: "old"}
	s1, err := relayclient.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyContext(t, ctx, "first online", online(r, "agent-1"))
	s1.Close()
	cfg.Version = "new"
	s2, err := relayclient.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	testkit.EventuallyContext(t, ctx, "second online", func() bool {
		p, _ := r.Presence("agent-1")
		return p.Online && p.Version == "new"
	})
}

// Drop closes a lender's link at once, over the internal API too.
func TestDropLink(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	log, _ := newLogger(t)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
	s1, err := relayclient.Connect(ctx, relayclient.Config{URL: r.url, Token: "good-token-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	testkit.EventuallyContext(t, ctx, "online", online(r, "agent-1"))
	const tok = "internal-token-0123456789"
	srv := httptest.NewServer(r.InternalHandler(tok))
	defer srv.Close()
	rem, err := relayserver.NewRemote(srv.URL, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := rem.Drop(ctx, "agent-1"); !ok || err != nil {
		t.Fatalf("drop: %v %v", ok, err)
	}
	select {
	case <-s1.CloseChan():
	case <-ctx.Done():
		t.Fatal("link not closed")
	}
	if p, _ := r.Presence("agent-1"); p.Online {
		t.Fatalf("presence after drop: %+v", p)
	}
	if ok, err := rem.Drop(ctx, "agent-1"); ok || err != nil {
		t.Fatalf("second drop: %v %v", ok, err)
	}
}

func TestManyAgents(t *testing.T) {
	const n = 500
	ctx := testCtx(t, 90*time.Second)
	log, _ := newLogger(t)
	r := startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log.With("quiet", true)})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	for i := range n {
		b := fastBackoff()
		b.Max = time.Second
		startAgent(t, relayclient.Config{
			URL: r.url, Token: fmt.Sprintf("sim--sim-%03d", i), Handler: echoHandler(fmt.Sprint(i)),
			HTTPClient: hc, Backoff: b,
		})
	}
	testkit.EventuallyContext(t, ctx, "all agents online", func() bool { return r.Online() == n })
	if got := len(r.Lenders()); got != n {
		t.Fatalf("%d agents registered", got)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		got, err := get(ctx, &http.Client{Transport: r.Transport(fmt.Sprintf("sim-%03d", i))}, "http://agent/x")
		if want := fmt.Sprintf("%d GET /x", i); err != nil || got != want {
			t.Fatalf("agent %d: %q, %v", i, got, err)
		}
	}
}
