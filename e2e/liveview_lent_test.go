package e2e

import (
	"context"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor/daemon"
	"github.com/berthdev/berth/supervisor/liveview"
)

// TestLiveViewLent watches a desktop computer on a lent machine: the
// supervisor (with its TURN relay and only the local provider, so that it
// opens no TURN port in the host firewall itself), a relay on loopback and
// a lending agent run in-process. The viewer page decodes the screen
// through TURN (the selected candidate is a relay one), a colour drawn with
// xsetroot shows, and the owner's link from the control API's session
// opens the same screen in a second tab.
func TestLiveViewLent(t *testing.T) { lentLiveView(t, ":0") }

// TestLiveViewLentForwarded is TestLiveViewLent with the supervisor's TURN
// relay on loopback, which the lent computer cannot reach, as it cannot
// reach a relay on another machine: the agent forwards a port on its
// docker0 address to the relay and gives the computer that one.
func TestLiveViewLentForwarded(t *testing.T) { lentLiveView(t, "127.0.0.1:0") }

func lentLiveView(t *testing.T, turnListen string) {
	requireDocker(t, desktopImage)
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	const relayToken = "e2e-relay-token-0123456789"

	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	supURL := "http://" + sln.Addr().String()
	rp := startRelay(t, "127.0.0.1:0", "127.0.0.1:0", supURL, relayToken, log)
	defer rp.kill()
	remote, err := relayserver.NewRemote("http://"+rp.interAddr, relayToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(ctx, daemon.Options{
		Egress:    daemon.EgressOptions{Listen: ":0"},
		LiveView:  daemon.LiveViewOptions{Listen: turnListen, DesktopUsers: 2, IdleStopMS: idleStopMS, Secret: "e2e-turn-secret-0123456789"},
		Providers: []string{"local"}, DefaultProvider: "local", DataDir: t.TempDir(), Token: "e2e-operator-token-0123456789",
		Getenv: func(string) string { return "" }, Logger: log.With("side", "supervisor"),
		Relay: remote, RelayURL: rp.wsURL(), RelayToken: relayToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSup := context.WithCancel(ctx)
	supDone := make(chan error, 1)
	go func() { supDone <- d.ServeListener(sctx, sln, 5*time.Second, nil) }()
	defer func() {
		stopSup()
		<-supDone
		d.Close()
	}()
	s := &super{t: t, url: supURL, token: d.Token, d: d}

	var code struct{ Code string }
	s.must("POST", "/v1/companions/pair-codes", map[string]any{"name": "e2e desktop lender"}, 201, &code)
	var paired struct{ AgentID, Token, RelayURL string }
	if st, err := callAPI(supURL, "", "POST", "/v1/companions/pair", "", map[string]any{"code": code.Code}, &paired); err != nil || st != 201 {
		t.Fatalf("pair: %d %v", st, err)
	}
	adir := t.TempDir()
	sock := filepath.Join(adir, control.SocketName)
	ready := make(chan *lender.Lender, 1)
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- lender.RunAgent(actx, lender.AgentOptions{
			AgentID: paired.AgentID, Token: paired.Token, RelayURL: paired.RelayURL, SupervisorURL: supURL,
			DataDir: adir, Socket: sock, Egress: lender.EgressOptions{Listen: ":0"},
			Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: desktopImage},
			Logger: log.With("side", "agent"), Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
		})
	}()
	agentStopped := false
	stopAgentOnce := func() {
		if agentStopped {
			return
		}
		agentStopped = true
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
	defer stopAgentOnce()
	select {
	case <-ready:
	case err := <-agentDone:
		t.Fatalf("agent ended: %v", err)
	}
	owner := control.NewClient(sock)
	defer owner.Close()
	if _, err := owner.UpdateSettings(ctx, control.SettingsUpdate{MemoryMB: ptrTo(int64(1024))}); err != nil {
		t.Fatal(err)
	}
	waitOnline(t, ctx, rp, paired.AgentID)

	s.must("POST", "/v1/agents", map[string]any{"id": "lvl", "name": "lvl"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "lvl", "provider": "local", "image": "desktop", "leaseSeconds": 600,
		"credentials": map[string]string{"lender": paired.AgentID}}, 201, nil)
	var sess struct{ ID string }
	s.must("POST", "/v1/agents/lvl/computer/start", nil, 200, &sess)
	defer s.call("POST", "/v1/agents/lvl/computer/stop", nil, nil)

	// The computer has the supervisor's TURN relay, and the agent opened
	// its port to computers in the host firewall (the supervisor, with no
	// docker provider, did not).
	hostPort := strings.Fields(s.exec("lvl", "echo $TURN_PUBLIC_HOST $TURN_PORT").Stdout)
	if len(hostPort) != 2 {
		t.Fatalf("TURN_PUBLIC_HOST and TURN_PORT in the lent computer: %q", hostPort)
	}
	port, err := strconv.Atoi(hostPort[1])
	if err != nil || port == 0 {
		t.Fatalf("TURN_PORT in the lent computer: %v", err)
	}
	forwarded := hostPort[0] != d.TURN.RelayIP().String()
	if want := strings.HasPrefix(turnListen, "127."); forwarded != want {
		t.Fatalf("the lent computer's relay is %v, the supervisor's on %v: forwarded %v, want %v", hostPort, d.TURN.RelayIP(), forwarded, want)
	}
	t.Cleanup(func() { docker.UnguardTURN(context.Background(), port) })
	opened := func(proto string) error {
		return exec.Command("iptables", "-w", "5", "-C", "INPUT", "-i", docker.BridgePrefix+"+", "-p", proto, "--dport", strconv.Itoa(port),
			"-m", "comment", "--comment", "berth: live-view TURN relay", "-j", "ACCEPT").Run()
	}
	for _, proto := range []string{"udp", "tcp"} {
		if err := opened(proto); err != nil {
			t.Errorf("no %s opening for TURN port %d: %v", proto, port, err)
		}
	}

	// An agent's viewer link, through the relay to the lent computer.
	var g liveview.Grant
	s.must("POST", "/v1/agents/lvl/computer/view", nil, 201, &g)
	if g.Session != sess.ID {
		t.Fatalf("grant %+v for session %s", g, sess.ID)
	}
	bctx := browser(t, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(g.URL)); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, bctx, 30*time.Second, func(v viewState) bool { return v.FramesDecoded > 0 && v.LocalCandidateType != "" })
	t.Logf("viewer: %+v", v)
	if v.LocalCandidateType != "relay" {
		t.Errorf("selected local candidate is %q, want relay", v.LocalCandidateType)
	}
	if v.Width != 1280 || v.Height != 720 {
		t.Errorf("video is %dx%d, want 1280x720", v.Width, v.Height)
	}
	if x := s.exec("lvl", "xsetroot -solid '#ff0000'"); x.ExitCode != 0 {
		t.Fatalf("xsetroot: %+v", x)
	}
	waitColour(t, bctx, [3]int{255, 0, 0}, 10*time.Second)

	// The owner's live view: the control API's session carries the owner
	// link, which opens the viewer page with a token of its own.
	ss, err := owner.Sessions(ctx)
	if err != nil || len(ss) != 1 {
		t.Fatalf("control API sessions: %+v %v", ss, err)
	}
	want := supURL + "/view/" + sess.ID + "/owner?key="
	if !strings.HasPrefix(ss[0].ViewURL, want) {
		t.Fatalf("session viewUrl %q, want %s...", ss[0].ViewURL, want)
	}
	octx, closeTab := chromedp.NewContext(bctx)
	defer closeTab()
	if err := chromedp.Do(octx, chromedp.Navigate(ss[0].ViewURL)); err != nil {
		t.Fatal(err)
	}
	ov := waitView(t, octx, 30*time.Second, func(v viewState) bool { return v.FramesDecoded > 0 && v.LocalCandidateType != "" })
	t.Logf("owner's viewer: %+v", ov)
	if ov.LocalCandidateType != "relay" {
		t.Errorf("owner's selected local candidate is %q, want relay", ov.LocalCandidateType)
	}
	if loc, err := chromedp.Run(octx, chromedp.Location()); err != nil || !strings.Contains(loc, "/view/"+sess.ID+"?token=") {
		t.Errorf("owner link landed on %q (%v), want the viewer page with a view token", loc, err)
	}
	if x := s.exec("lvl", "xsetroot -solid '#0000ff'"); x.ExitCode != 0 {
		t.Fatalf("xsetroot: %+v", x)
	}
	waitColour(t, octx, [3]int{0, 0, 255}, 10*time.Second)

	// Both seats are taken (DESKTOP_USERS is 2): the next link is refused.
	var e struct {
		Error struct{ Code, Message string }
	}
	s.must("POST", "/v1/agents/lvl/computer/view", nil, 409, &e)
	if e.Error.Code != liveview.CodeDesktopBusy {
		t.Errorf("a third viewer: %+v, want %s", e, liveview.CodeDesktopBusy)
	}

	// The agent closes its forwarder's port when it stops.
	if forwarded {
		s.must("POST", "/v1/agents/lvl/computer/stop", nil, 200, nil)
		stopAgentOnce()
		for _, proto := range []string{"udp", "tcp"} {
			if opened(proto) == nil {
				t.Errorf("the forwarder's %s opening on port %d is still there after the agent stopped", proto, port)
			}
		}
	}
}
