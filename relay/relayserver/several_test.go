package relayserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

const internalToken = "several-relays-token-0123456789"

// links is the supervisor's side of the reports, kept in memory: the
// newest link of each lender, online while its lease holds. The store's
// own rules are tested in the store's suite.
type links struct {
	mu      sync.Mutex
	rows    map[string]row
	reports []relayserver.Report
}

type row struct {
	relay   string
	p       relayserver.Presence
	expires time.Time
}

func (l *links) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != relayserver.ReportPath || r.Header.Get(relayserver.TokenHeader) != internalToken {
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	var rep relayserver.Report
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil || rep.Check() != nil {
		http.Error(w, "bad report", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports = append(l.reports, rep)
	now := time.Now()
	for _, p := range rep.Lenders {
		cur, ok := l.rows[p.LenderID]
		mine := !ok || cur.relay == rep.Relay || !now.Before(cur.expires) || !cur.p.ConnectedAt.After(p.ConnectedAt)
		switch {
		case p.Online && mine:
			l.rows[p.LenderID] = row{relay: rep.Relay, p: relayserver.Presence(p), expires: now.Add(time.Duration(rep.LeaseSeconds) * time.Second)}
		case !p.Online && ok && cur.relay == rep.Relay:
			cur.expires = now
			l.rows[p.LenderID] = cur
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (l *links) Link(_ context.Context, id string) (relayserver.Link, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[id]
	if !ok {
		return relayserver.Link{}, false, nil
	}
	r.p.Online = time.Now().Before(r.expires)
	return relayserver.Link{Relay: r.relay, Presence: r.p}, true, nil
}

func (l *links) Links(ctx context.Context) ([]relayserver.Link, error) {
	l.mu.Lock()
	ids := make([]string, 0, len(l.rows))
	for id := range l.rows {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	var out []relayserver.Link
	for _, id := range ids {
		lk, _, _ := l.Link(ctx, id)
		out = append(out, lk)
	}
	return out, nil
}

// TestSeveralRelays: two relays report their lenders; a Router reaches
// each lender through the relay that holds it, follows a lender to the
// other relay when its relay dies, and answers offline for a lender no
// relay holds.
func TestSeveralRelays(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	log, _ := newLogger(t)
	sup := &links{rows: map[string]row{}}
	supSrv := httptest.NewServer(sup)
	t.Cleanup(supSrv.Close)

	var relays [2]*testRelay
	var internal [2]*httptest.Server
	for i := range relays {
		relays[i] = startRelay(t, "127.0.0.1:0", relayserver.Config{Logger: log})
		internal[i] = httptest.NewServer(relays[i].InternalHandler(internalToken))
		t.Cleanup(internal[i].Close)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- relays[i].Report(rctx, relayserver.ReportConfig{SupervisorURL: supSrv.URL, Token: internalToken,
				Advertise: internal[i].URL, Interval: 50 * time.Millisecond})
		}()
		t.Cleanup(func() {
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Report returned %v", err)
			}
		})
	}
	// agent-1 prefers the first relay, agent-2 the second.
	startAgent(t, relayclient.Config{URL: relays[0].url + "," + relays[1].url, Token: "good-token-1", Handler: echoHandler("one"), Logger: log, Backoff: fastBackoff()})
	startAgent(t, relayclient.Config{URL: relays[1].url + "," + relays[0].url, Token: "good-token-2", Handler: echoHandler("two"), Logger: log, Backoff: fastBackoff()})
	testkit.EventuallyContext(t, ctx, "each agent at its first relay", func() bool { return online(relays[0], "agent-1")() && online(relays[1], "agent-2")() })

	rt, err := relayserver.NewRouter(sup, internalToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	reach := func(id, want string) bool {
		got, err := get(ctx, &http.Client{Transport: rt.Transport(id)}, "http://agent/v1/computers")
		return err == nil && got == want
	}
	testkit.EventuallyContext(t, ctx, "both agents through the router", func() bool {
		return reach("agent-1", "one GET /v1/computers") && reach("agent-2", "two GET /v1/computers")
	})
	if l, ok, _ := sup.Link(ctx, "agent-1"); !ok || l.Relay != internal[0].URL {
		t.Fatalf("agent-1's link: %+v, want at %s", l, internal[0].URL)
	}
	sup.mu.Lock()
	rep := sup.reports[len(sup.reports)-1]
	sup.mu.Unlock()
	if rep.LeaseSeconds != relayserver.MinLeaseSeconds {
		t.Fatalf("lease %d s for reports every 50 ms, want the minimum %d", rep.LeaseSeconds, relayserver.MinLeaseSeconds)
	}

	// The first relay dies: agent-1 moves to the second, and the router
	// follows it.
	relays[0].stop()
	internal[0].Close()
	testkit.EventuallyContext(t, ctx, "agent-1 at the second relay", online(relays[1], "agent-1"))
	testkit.EventuallyContext(t, ctx, "agent-1 through the router again", func() bool { return reach("agent-1", "one GET /v1/computers") })
	if l, _, _ := sup.Link(ctx, "agent-1"); l.Relay != internal[1].URL || !l.Presence.Online {
		t.Fatalf("agent-1's link after the move: %+v", l)
	}
	if n, err := rt.Lenders(ctx); err != nil || len(n) != 2 {
		t.Fatalf("lenders: %+v %v", n, err)
	}

	// A lender no relay holds is offline, without a request sent.
	if _, ok, err := rt.Presence(ctx, "agent-9"); ok || err != nil {
		t.Fatalf("unknown lender: ok=%v %v", ok, err)
	}
	_, err = (&http.Client{Transport: rt.Transport("agent-9")}).Get("http://agent/v1/computers")
	if oe := new(relayserver.OfflineError); !errors.As(err, &oe) || oe.LenderID != "agent-9" {
		t.Fatalf("request to an unknown lender: %v, want an OfflineError", err)
	}
	if dropped, err := rt.Drop(ctx, "agent-2"); err != nil || !dropped {
		t.Fatalf("drop agent-2 through the router: %v %v", dropped, err)
	}
}

// TestReportCheck: a report's fields are refused by name and limit.
func TestReportCheck(t *testing.T) {
	ok := relayserver.Report{Relay: "https://relay-1.internal:8081", LeaseSeconds: 6, Lenders: []relayserver.PresenceInfo{{LenderID: "cp_a"}}}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*relayserver.Report)
		want string
	}{
		{"no relay", func(r *relayserver.Report) { r.Relay = "" }, "relay:"},
		{"relay with a query", func(r *relayserver.Report) { r.Relay = "http://r:1?x=1" }, "relay:"},
		{"long relay", func(r *relayserver.Report) { r.Relay = "http://" + strings.Repeat("r", 600) }, "more than 512"},
		{"lease 0", func(r *relayserver.Report) { r.LeaseSeconds = 0 }, "leaseSeconds: 0 is not within 2..300"},
		{"empty lender", func(r *relayserver.Report) { r.Lenders = append(r.Lenders, relayserver.PresenceInfo{}) }, "lenders[1].agentId"},
	} {
		r := ok
		r.Lenders = append([]relayserver.PresenceInfo(nil), ok.Lenders...)
		tc.edit(&r)
		if err := r.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
