package lender

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

// fakeRelay is a relay on a fixed loopback address that can be killed and
// started again there.
type fakeRelay struct {
	srv  *relayserver.Server
	http *http.Server
	addr string
}

func startTestRelay(t *testing.T, addr string) *fakeRelay {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRelay{addr: ln.Addr().String()}
	r.srv = relayserver.New(relayserver.Config{Authenticate: func(tok string) (string, bool) { return "cp_link", tok == "good-token" }})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, r.srv)
	r.http = &http.Server{Handler: mux}
	go r.http.Serve(ln)
	return r
}

func (r *fakeRelay) kill() {
	r.http.Close()
	r.srv.Close()
}

// TestRelayLinkStatus: the owner's status follows the link; after the
// relay dies the agent waits out its backoff on the (fake) clock and
// connects again to a relay that is back.
func TestRelayLinkStatus(t *testing.T) {
	r := newRig(t, "cp_link", "", nil)
	ctx := testContext(t, time.Minute)
	rel := startTestRelay(t, "127.0.0.1:0")
	defer func() { rel.kill() }()
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.l.Serve(lctx, relayclient.Config{
			URL: "ws://" + rel.addr + relay.ConnectPath, Token: "good-token", Clock: r.clk,
			Backoff: &relayclient.Backoff{Min: time.Second, Max: time.Second, Stable: time.Minute, Clock: r.clk},
		})
	}()
	defer func() { stop(); <-done }()
	waitRelay := func(online bool, advance bool) {
		t.Helper()
		testkit.EventuallyContext(t, ctx, fmt.Sprintf("the relay link online=%v", online), func() bool {
			if r.l.Status(ctx).Relay.Online == online {
				return true
			}
			if advance {
				r.clk.Advance(time.Second)
			}
			return false
		})
	}
	waitRelay(true, false)
	first := r.l.Status(ctx).Relay.Since
	rel.kill()
	waitRelay(false, false)
	st := r.l.Status(ctx)
	if st.Relay.LastError == "" || st.Relay.URL != "ws://"+rel.addr+relay.ConnectPath {
		t.Fatalf("status while the relay is gone: %+v", st.Relay)
	}
	rel = startTestRelay(t, rel.addr)
	// Nothing happens until the backoff has passed on the clock.
	time.Sleep(100 * time.Millisecond)
	if r.l.Status(ctx).Relay.Online {
		t.Fatal("reconnected before the backoff passed")
	}
	waitRelay(true, true)
	if st := r.l.Status(ctx); !st.Relay.Since.After(first) || st.Relay.LastError != "" {
		t.Fatalf("status after reconnecting: %+v", st.Relay)
	}
	if p, ok := rel.srv.Presence("cp_link"); !ok || !p.Online {
		t.Fatalf("presence on the new relay: %+v", p)
	}
}
