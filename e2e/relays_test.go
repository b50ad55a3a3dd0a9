package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor/daemon"
)

// TestSeveralRelays: two supervisors on one PostgreSQL (RELAY_URL=lookup),
// two relay processes each reporting to one of them, and two lenders, each given
// both relays in a different order. Either supervisor reaches both
// lenders, wherever their links are. The first relay is killed while a
// command runs on its lender: the exec is uncertain, the lender moves to
// the other relay, the session goes on and the command ran once. When the
// last relay is killed, its lenders show offline within seconds.
func TestSeveralRelays(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logs := syncbuf.Logged(t.Log)
	log := slog.New(slog.NewTextHandler(logs, nil))
	const relayToken = "several-relays-relay-token-0123"
	const opToken = "several-relays-operator-token-0123"
	pg := pgtest.Start(t)
	keyFile := filepath.Join(t.TempDir(), "secret.key")

	// Addresses first: the supervisors name the relays, the relays the
	// supervisors.
	var slns [2]net.Listener
	var supURLs [2]string
	for i := range slns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		slns[i], supURLs[i] = ln, "http://"+ln.Addr().String()
	}
	// Two relays, each a `berth relay` process reporting its lenders to
	// one of the supervisors every 2 s (a lease of 6 s), named by its
	// default --advertise.
	var rps [2]*relayBin
	for i := range rps {
		rps[i] = startRelayBin(t, ctx, supURLs[i], relayToken)
	}
	both := rps[0].wsURL() + "," + rps[1].wsURL()

	env := map[string]string{"COMPUTER_IMAGE_HEADLESS": "berth/test:latest", "RELAY_URL": relayserver.Lookup}
	var sups [2]*super
	for i := range sups {
		d, err := daemon.New(ctx, daemon.Options{
			Store: pg, DataDir: t.TempDir(), KeyFile: keyFile, Token: opToken,
			ComputerTokenSecret: "several-relays-computer-secret-0123456789",
			Providers:           []string{"local"}, DefaultProvider: "local", Egress: daemon.EgressOptions{Listen: "off"},
			Getenv: func(k string) string { return env[k] }, Logger: log.With("supervisor", i+1),
			RelayURL: both, RelayToken: relayToken,
		})
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.ServeListener(sctx, slns[i], 5*time.Second, nil) }()
		defer func() {
			stop()
			<-done
			d.Close()
		}()
		sups[i] = &super{t: t, url: supURLs[i], token: opToken, d: d}
	}

	// Two lenders paired at the first supervisor: A prefers the first
	// relay, B the second.
	type lent struct {
		id    string
		l     *lender.Lender
		relay int // the relay it links to first
	}
	var lenders [2]*lent
	for i := range lenders {
		var code struct{ Code string }
		sups[0].must("POST", "/v1/companions/pair-codes", map[string]any{"name": "lender " + string(rune('A'+i))}, 201, &code)
		var paired struct{ AgentID, Token, RelayURL string }
		if st, err := callAPI(supURLs[0], "", "POST", "/v1/companions/pair", "", map[string]any{"code": code.Code}, &paired); err != nil || st != 201 {
			t.Fatalf("pair: %d %v", st, err)
		}
		if paired.RelayURL != both {
			t.Fatalf("pairing names relays %q, want %q", paired.RelayURL, both)
		}
		urls := paired.RelayURL
		if i == 1 {
			urls = rps[1].wsURL() + "," + rps[0].wsURL()
		}
		ready := make(chan *lender.Lender, 1)
		actx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- lender.RunAgent(actx, lender.AgentOptions{
				LenderID: paired.AgentID, Token: paired.Token, RelayURL: urls, SupervisorURL: supURLs[0],
				DataDir: t.TempDir(), Socket: "off", Docker: docker.Options{HeadlessImage: "berth/test:latest"},
				Logger: log.With("lender", i+1), Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
			})
		}()
		defer func() {
			stop()
			<-done
		}()
		select {
		case l := <-ready:
			lenders[i] = &lent{id: paired.AgentID, l: l, relay: i}
		case err := <-done:
			t.Fatalf("lender %d ended: %v", i+1, err)
		}
	}
	for _, ln := range lenders {
		testkit.EventuallyContext(t, ctx, "each lender at its first relay", rps[ln.relay].online(ctx, ln.id))
	}
	// Each supervisor sees both lenders online, whichever relay reported them.
	for _, s := range sups {
		testkit.EventuallyContext(t, ctx, "both lenders online at "+s.url, func() bool { return onlineLenders(s) == 2 })
	}

	// One agent on each lender, started through one supervisor and used
	// through the other.
	for i, ln := range lenders {
		agent := "rel" + string(rune('a'+i))
		sups[0].must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
		sups[0].must("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "local", "leaseSeconds": 600,
			"credentials": map[string]string{"lender": ln.id}}, 201, nil)
		var sess session
		sups[1].must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, &sess)
		t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", "berth-c-"+strings.TrimPrefix(sess.ID, "s_")).Run() })
		if cs := ln.l.Computers(); len(cs) != 1 {
			t.Fatalf("lender %d runs %d computers, want 1", i+1, len(cs))
		}
		if x := sups[0].exec(agent, "echo on lender "+string(rune('A'+i))); x.Stdout != "on lender "+string(rune('A'+i))+"\n" {
			t.Fatalf("exec on %s: %+v", agent, x)
		}
	}

	// The first relay dies while a command runs on lender A.
	container := lenders[0].l.Computers()[0].MachineID
	body, _ := json.Marshal(map[string]any{"command": "echo ran >> /home/berth/marker; sleep 30; echo done", "timeoutSeconds": 60})
	first := make(chan execResult, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", supURLs[1]+"/v1/agents/rela/computer/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+opToken)
		req.Header.Set("Idempotency-Key", "relay-dies")
		var x execResult
		if resp, err := http.DefaultClient.Do(req); err != nil {
			t.Errorf("exec: %v", err)
		} else {
			json.NewDecoder(resp.Body).Decode(&x)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("exec: %d", resp.StatusCode)
			}
		}
		first <- x
	}()
	testkit.EventuallyContext(t, ctx, "the command's marker in lender A's computer", func() bool {
		out, err := exec.Command("docker", "exec", container, "cat", "/home/berth/marker").Output()
		return err == nil && string(out) == "ran\n"
	})
	rps[0].kill(t)
	if x := <-first; !x.Uncertain || x.ExitCode != -1 {
		t.Fatalf("exec cut by the relay: %+v, want uncertain", x)
	}
	// Lender A moves to the second relay; both supervisors follow it.
	testkit.EventuallyContext(t, ctx, "lender A at the second relay", rps[1].online(ctx, lenders[0].id))
	// Both look a lender up in their shared store, which has the move once
	// the second relay's report of it is in.
	testkit.EventuallyContext(t, ctx, "lender A's link recorded at the second relay", func() bool {
		l, err := sups[0].d.Store.GetLenderLink(ctx, lenders[0].id)
		return err == nil && l.Relay == rps[1].internal && l.Online(time.Now())
	})
	for _, s := range sups {
		if x := s.exec("rela", "cat /home/berth/marker"); x.Stdout != "ran\n" {
			t.Fatalf("after the move, through %s: %+v (the command must have run once)", s.url, x)
		}
		if x := s.exec("relb", "echo still here"); x.Stdout != "still here\n" {
			t.Fatalf("lender B through %s: %+v", s.url, x)
		}
	}
	var view struct {
		Session session `json:"session"`
	}
	sups[0].must("GET", "/v1/agents/rela/computer", nil, 200, &view)
	if view.Session.State != "running" {
		t.Fatalf("lender A's session after the move: %+v", view.Session)
	}
	for _, agent := range []string{"rela", "relb"} {
		sups[1].must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
	}

	// The last relay dies: its lenders' leases run out within seconds.
	rps[1].kill(t)
	killed := time.Now()
	testkit.EventuallyContext(t, ctx, "both lenders offline", func() bool { return onlineLenders(sups[0]) == 0 })
	if took := time.Since(killed); took > 10*time.Second {
		t.Fatalf("lenders shown online %v after their relay died, want within the 6 s lease", took)
	}
	t.Logf("lenders offline %v after their relay was killed (lease 6 s)", time.Since(killed).Round(time.Millisecond))
}

// onlineLenders counts the lenders GET /v1/lenders shows online.
func onlineLenders(s *super) int {
	var ls []struct{ Online bool }
	s.must("GET", "/v1/lenders", nil, 200, &ls)
	n := 0
	for _, l := range ls {
		if l.Online {
			n++
		}
	}
	return n
}

// relayBin is a `berth relay` process on loopback.
type relayBin struct {
	p          *berthProc
	agentsAddr string
	internal   string // its internal API's URL, as it reports lenders
	r          *relayserver.Remote
}

func startRelayBin(t *testing.T, ctx context.Context, supURL, token string) *relayBin {
	t.Helper()
	agents, internal := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	env := append(os.Environ(), "RELAY_TOKEN="+token)
	p := startProc(t, ctx, env, "relay", "--listen", agents, "--internal-listen", internal, "--supervisor", supURL)
	p.waitLine(t, regexp.MustCompile(`msg="reporting lenders to the (supervisor)" advertise=http://`+regexp.QuoteMeta(internal)))
	r, err := relayserver.NewRemote("http://"+internal, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &relayBin{p: p, agentsAddr: agents, internal: "http://" + internal, r: r}
}

func (b *relayBin) wsURL() string { return "ws://" + b.agentsAddr + relay.ConnectPath }

// online reports whether the lender is linked to this relay, as its
// internal API says.
func (b *relayBin) online(ctx context.Context, id string) func() bool {
	return func() bool {
		p, ok, err := b.r.Presence(ctx, id)
		return err == nil && ok && p.Online
	}
}

// kill ends the relay with SIGKILL: no goodbye to its lenders or its
// supervisor.
func (b *relayBin) kill(t *testing.T) {
	select {
	case <-b.p.done:
		return
	default:
	}
	b.p.cmd.Process.Kill()
	<-b.p.done
}
