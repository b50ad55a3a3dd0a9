package lender

import (
	"context"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
)

// TestDesktopViewURLAndTURN: a desktop computer's start opens the agent's
// own TURN forwarder port in the host firewall and gives the computer the
// forwarder, never the relay or the port the supervisor named (a headless
// computer's start opens nothing, nor does a bad port), and its session
// carries the owner link once the supervisor's token has passed through
// the agent, a headless one never.
func TestDesktopViewURLAndTURN(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	r := newRig(t, "cp_view", "", nil)
	r.set(func(s *control.Settings) { s.MaxComputers = 3 })
	var mu sync.Mutex
	var opened []int
	r.l.cfg.OpenTURN = func(_ context.Context, port int) error {
		mu.Lock()
		opened = append(opened, port)
		mu.Unlock()
		return nil
	}
	r.l.cfg.Pairing.URL = "https://berth.example.com/"
	r.l.cfg.TURNRelay = "127.0.0.1:3478"

	// A hostile supervisor names this machine's docker0 address and SSH.
	desk, tok := request("agent-d")
	desk.Image, desk.Env = providers.ImageDesktop, map[string]string{"TURN_PUBLIC_HOST": "172.17.0.1", "TURN_PORT": "22"}
	head, headTok := request("agent-h")
	head.Env = map[string]string{"TURN_PUBLIC_HOST": "172.17.0.1", "TURN_PORT": "34781"}
	bad, _ := request("agent-b")
	bad.Image, bad.Env = providers.ImageDesktop, map[string]string{"TURN_PORT": "70000"}
	destroyAll(t, desk.ComputerID, head.ComputerID, bad.ComputerID)
	for _, req := range []lending.CreateRequest{desk, head, bad} {
		if _, err := r.l.Create(ctx, req); err != nil {
			t.Fatalf("create %s: %v", req.Image, err)
		}
	}
	r.l.turn.mu.Lock()
	f := r.l.turn.fwd
	r.l.turn.mu.Unlock()
	if f == nil {
		t.Fatal("no TURN forwarder for the desktop computer")
	}
	if target := f.Target(); target != "127.0.0.1:3478" {
		t.Errorf("the forwarder connects to %s, want the owner's 127.0.0.1:3478", target)
	}
	mu.Lock()
	got := slices.Clone(opened)
	mu.Unlock()
	if !slices.Equal(got, []int{f.Port()}) || f.Port() == 22 {
		t.Errorf("TURN ports opened: %v, want only the forwarder's %d", got, f.Port())
	}

	// viewURLs lists the sessions once (each listing asks the engine for
	// every computer's stats) and returns the view URLs of ids.
	viewURLs := func(ids ...string) []string {
		t.Helper()
		sessions := r.l.Sessions(ctx)
		urls := make([]string, len(ids))
		for i, id := range ids {
			j := slices.IndexFunc(sessions, func(s control.Session) bool { return s.ID == id })
			if j < 0 {
				t.Fatalf("no session %s", id)
			}
			urls[i] = sessions[j].ViewURL
		}
		return urls
	}
	if u := viewURLs(desk.ComputerID)[0]; u != "" {
		t.Errorf("viewUrl before the supervisor's first call: %q, want none", u)
	}
	srv := httptest.NewServer(r.l.Handler())
	defer srv.Close()
	testkit.EventuallyContext(t, ctx, "computerd to answer", healthy(ctx, computerd.NewClient(srv.URL+lending.EndpointPath(desk.ComputerID), tok)))
	want := "https://berth.example.com/view/" + desk.SessionID + "/owner?key=" + lending.OwnerViewKey(tok, desk.SessionID)
	urls := viewURLs(desk.ComputerID, head.ComputerID)
	if u := urls[0]; u != want {
		t.Errorf("viewUrl %q, want %q", u, want)
	}
	if u := urls[1]; u != "" {
		t.Errorf("a headless session's viewUrl: %q, want none", u)
	}

	// The desktop has the forwarder; the headless computer no TURN at all.
	env := func(id, tok string) string {
		t.Helper()
		c := computerd.NewClient(srv.URL+lending.EndpointPath(id), tok)
		testkit.EventuallyContext(t, ctx, "computerd to answer", healthy(ctx, c))
		x, err := c.Exec(ctx, computerd.ExecRequest{Command: `echo "$TURN_PUBLIC_HOST:$TURN_PORT"`, TimeoutMs: 10000})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(x.Stdout)
	}
	if got, want := env(desk.ComputerID, tok), net.JoinHostPort(f.Host(), strconv.Itoa(f.Port())); got != want {
		t.Errorf("the desktop's TURN relay: %q, want the forwarder %q", got, want)
	}
	if got := env(head.ComputerID, headTok); got != ":" {
		t.Errorf("the headless computer's TURN variables: %q, want none", got)
	}
}
