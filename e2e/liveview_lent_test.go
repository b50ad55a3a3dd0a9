package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
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
// reach a relay on another machine. In both, the agent forwards a port on
// its docker0 address to the relay its owner named (--turn-relay) and
// gives the computer that one.
func TestLiveViewLentForwarded(t *testing.T) { lentLiveView(t, "127.0.0.1:0") }

// lentRig is a supervisor with live view and the local provider, a relay
// on loopback and a lending agent paired to it, all in-process.
type lentRig struct {
	s         *super
	d         *daemon.Daemon
	lender    string // the lending agent's companion id
	owner     *control.Client
	stopAgent func() // stops the agent (once); computers keep running
}

// startLentRig starts the rig, with the supervisor's TURN relay on
// turnListen and providers provs (the first is the default). Everything
// stops when tb ends; ctx bounds the setup.
func startLentRig(tb testing.TB, ctx context.Context, turnListen string, provs ...string) *lentRig {
	tb.Helper()
	lifetime := 10 * time.Minute
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > lifetime {
		lifetime = time.Until(dl) // a long benchmark outlives the default
	}
	life, endLife := context.WithTimeout(context.Background(), lifetime)
	tb.Cleanup(endLife)
	log := slog.New(slog.NewTextHandler(tb.Output(), nil))
	const relayToken = "e2e-relay-token-0123456789"
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	supURL := "http://" + sln.Addr().String()

	// The relay, as berth relay runs it: agents on one listener, the
	// internal API on another, tokens checked with the supervisor.
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	rsrv := relayserver.New(relayserver.Config{Logger: log.With("side", "relay"),
		Authenticate: relayserver.SupervisorAuth(supURL, relayToken, nil, func(msg string, args ...any) { log.Warn(msg, args...) })})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, rsrv)
	agents, inter := &http.Server{Handler: mux}, &http.Server{Handler: rsrv.InternalHandler(relayToken)}
	go agents.Serve(aln)
	go inter.Serve(iln)
	tb.Cleanup(func() { inter.Close(); agents.Close(); rsrv.Close() })
	remote, err := relayserver.NewRemote("http://"+iln.Addr().String(), relayToken, nil)
	if err != nil {
		tb.Fatal(err)
	}

	env := map[string]string{"COMPUTER_IMAGE_DESKTOP": desktopImage, "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "0"}
	d, err := daemon.New(life, daemon.Options{
		Egress:    daemon.EgressOptions{Listen: ":0"},
		LiveView:  daemon.LiveViewOptions{Listen: turnListen, DesktopUsers: 2, IdleStopMS: idleStopMS, Secret: "e2e-turn-secret-0123456789"},
		Providers: provs, DefaultProvider: provs[0], DataDir: tb.TempDir(), Token: "e2e-operator-token-0123456789",
		Getenv: func(k string) string { return env[k] }, Logger: log.With("side", "supervisor"),
		Relay: remote, RelayURL: "ws://" + aln.Addr().String() + relay.ConnectPath, RelayToken: relayToken,
	})
	if err != nil {
		tb.Fatal(err)
	}
	sctx, stopSup := context.WithCancel(life)
	supDone := make(chan error, 1)
	go func() { supDone <- d.ServeListener(sctx, sln, 5*time.Second, nil) }()
	tb.Cleanup(func() {
		stopSup()
		<-supDone
		d.Close()
	})
	s := &super{t: tb, url: supURL, token: d.Token, d: d}

	var code struct{ Code string }
	s.must("POST", "/v1/companions/pair-codes", map[string]any{"name": "e2e desktop lender"}, 201, &code)
	var paired struct{ AgentID, Token, RelayURL string }
	if st, err := callAPI(supURL, "", "POST", "/v1/companions/pair", "", map[string]any{"code": code.Code}, &paired); err != nil || st != 201 {
		tb.Fatalf("pair: %d %v", st, err)
	}
	adir := tb.TempDir()
	sock := filepath.Join(adir, control.SocketName)
	ready := make(chan *lender.Lender, 1)
	actx, cancelAgent := context.WithCancel(life)
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- lender.RunAgent(actx, lender.AgentOptions{
			LenderID: paired.AgentID, Token: paired.Token, RelayURL: paired.RelayURL, SupervisorURL: supURL, TURNRelay: d.TURNRelay(),
			DataDir: adir, Socket: sock, Egress: lender.EgressOptions{Listen: ":0"},
			Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: desktopImage},
			Logger: log.With("side", "agent"), Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
		})
	}()
	var once sync.Once
	r := &lentRig{s: s, d: d, lender: paired.AgentID, owner: control.NewClient(sock)}
	r.stopAgent = func() {
		once.Do(func() {
			cancelAgent()
			if err := <-agentDone; err != nil {
				tb.Errorf("agent: %v", err)
			}
		})
	}
	tb.Cleanup(r.stopAgent)
	tb.Cleanup(func() { r.owner.Close() })
	select {
	case <-ready:
	case err := <-agentDone:
		tb.Fatalf("agent ended: %v", err)
	}
	if _, err := r.owner.UpdateSettings(ctx, control.SettingsUpdate{MemoryMB: ptrTo(int64(1024))}); err != nil {
		tb.Fatal(err)
	}
	testkit.EventuallyContext(tb, ctx, "the agent online at the relay", func() bool {
		p, ok := rsrv.Presence(paired.AgentID)
		return ok && p.Online
	})
	return r
}

// startLentDesktop connects agent to a desktop computer on the rig's
// lender and starts it; it is stopped when tb ends, before the agent.
func (r *lentRig) startLentDesktop(tb testing.TB, agent string) string {
	tb.Helper()
	r.s.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
	r.s.must("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "local", "image": "desktop", "leaseSeconds": 600,
		"credentials": map[string]string{"lender": r.lender}}, 201, nil)
	var sess struct{ ID string }
	r.s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, &sess)
	tb.Cleanup(func() { r.s.call("POST", "/v1/agents/"+agent+"/computer/stop", nil, nil) })
	return sess.ID
}

func lentLiveView(t *testing.T, turnListen string) {
	requireDocker(t, desktopImage)
	requireChromium(t)
	heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startLentRig(t, ctx, turnListen, "local")
	s, d, owner := r.s, r.d, r.owner
	supURL := s.url
	sid := r.startLentDesktop(t, "lvl")

	// The computer has the agent's own forwarder, never the supervisor's
	// relay straight, and the agent opened the forwarder's port to
	// computers in the host firewall (the supervisor, with no docker
	// provider, did not).
	hostPort := strings.Fields(s.exec("lvl", "echo $TURN_PUBLIC_HOST $TURN_PORT").Stdout)
	if len(hostPort) != 2 {
		t.Fatalf("TURN_PUBLIC_HOST and TURN_PORT in the lent computer: %q", hostPort)
	}
	port, err := strconv.Atoi(hostPort[1])
	if err != nil || port == 0 {
		t.Fatalf("TURN_PORT in the lent computer: %v", err)
	}
	if got := net.JoinHostPort(hostPort[0], hostPort[1]); got == d.TURNRelay() {
		t.Fatalf("the lent computer was given the supervisor's relay %s, not the agent's forwarder", got)
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
	if g.Session != sid {
		t.Fatalf("grant %+v for session %s", g, sid)
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
	want := supURL + "/view/" + sid + "/owner?key="
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
	if loc, err := chromedp.Run(octx, chromedp.Location()); err != nil || !strings.Contains(loc, "/view/"+sid+"?token=") {
		t.Errorf("owner link landed on %q (%v), want the viewer page with a view token", loc, err)
	}
	if x := s.exec("lvl", "xsetroot -solid '#0000ff'"); x.ExitCode != 0 {
		t.Fatalf("xsetroot: %+v", x)
	}
	waitColour(t, octx, [3]int{0, 0, 255}, 10*time.Second)

	// The console's Lenders page shows the lender online, running this
	// computer, with the limits its owner set, as the lender reports them.
	page := consoleGet(t, supURL, s.token, "/lenders")
	for _, want := range []string{"e2e desktop lender", "up to 2 computers at once", "1024 MB each", "desktops allowed"} {
		if !strings.Contains(page, want) {
			t.Errorf("the console's Lenders page lacks %q:\n%s", want, page)
		}
	}

	// Both seats are taken (DESKTOP_USERS is 2): the next link is refused.
	var e struct {
		Error struct{ Code, Message string }
	}
	s.must("POST", "/v1/agents/lvl/computer/view", nil, 409, &e)
	if e.Error.Code != liveview.CodeDesktopBusy {
		t.Errorf("a third viewer: %+v, want %s", e, liveview.CodeDesktopBusy)
	}

	// The agent closes its forwarder's port when it stops.
	s.must("POST", "/v1/agents/lvl/computer/stop", nil, 200, nil)
	r.stopAgent()
	for _, proto := range []string{"udp", "tcp"} {
		if opened(proto) == nil {
			t.Errorf("the forwarder's %s opening on port %d is still there after the agent stopped", proto, port)
		}
	}
}

// BenchmarkLiveViewLent measures live view of desktops on lent machines
// against a desktop of the docker provider (the baseline) in the same run:
// the time from opening the viewer page to its first frame (the encoder
// warm) and the capture-to-display latency, for lent computers whose
// agent forwards to the supervisor's TURN relay on this machine's docker0
// address and on loopback (as out of reach as one on another machine).
func BenchmarkLiveViewLent(b *testing.B) {
	requireDocker(b, desktopImage)
	requireChromium(b)
	ctx, cancel := context.WithTimeout(context.Background(), liveBenchDeadline(b, 3*time.Minute))
	defer cancel()
	direct := startLentRig(b, ctx, ":0", "docker", "local")
	forwarded := startLentRig(b, ctx, "127.0.0.1:0", "local")
	startDesktop(direct.s, "bd")
	direct.startLentDesktop(b, "bl")
	forwarded.startLentDesktop(b, "bf")
	palette := []struct{ hex, key string }{
		{"#ff0000", "100"}, {"#00ff00", "010"}, {"#0000ff", "001"}, {"#ffff00", "110"}, {"#00ffff", "011"}, {"#ff00ff", "101"},
	}
	// measure opens one viewer page and returns its first-frame time and
	// the latencies of 12 colour changes.
	measure := func(s *super, agent string) (float64, []float64) {
		var g liveview.Grant
		s.must("POST", "/v1/agents/"+agent+"/computer/view", nil, 201, &g)
		time.Sleep(300 * time.Millisecond) // the page opens a moment after the link
		bctx := browser(b, ctx)
		defer chromedp.Cancel(bctx)
		if err := chromedp.Do(bctx, chromedp.Navigate(g.URL)); err != nil {
			b.Fatal(err)
		}
		v := waitView(b, bctx, 30*time.Second, func(v viewState) bool { return v.FirstFrameMs > 0 })
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](latencyJS)); err != nil {
			b.Fatal(err)
		}
		var script strings.Builder
		for i := range 12 {
			p := palette[i%len(palette)]
			fmt.Fprintf(&script, "xsetroot -solid '%s'; echo %s $(date +%%s%%N); sleep 0.35; ", p.hex, p.key)
		}
		x := s.exec(agent, script.String())
		time.Sleep(500 * time.Millisecond)
		log, err := chromedp.Run(bctx, chromedp.Evaluate[latencyLog](`window.berthLat`))
		if err != nil {
			b.Fatal(err)
		}
		chromedp.Do(bctx, chromedp.Navigate("about:blank"))
		leaveView(b, s.url, g)
		// The next page's encoder does not share the CPU with this one's.
		testkit.Eventually(b, 20*time.Second, "the encoder of "+agent+" to stop", func() bool { return encoders(s, agent) == "" })
		return v.FirstFrameMs, matchLatency(x.Stdout, log)
	}
	measure(direct.s, "bd") // the browser's own first start is not the page's cost
	var firstD, firstL, firstF, latD, latL, latF []float64
	b.ResetTimer()
	for range b.N {
		f, l := measure(direct.s, "bd")
		firstD, latD = append(firstD, f), append(latD, l...)
		f, l = measure(direct.s, "bl")
		firstL, latL = append(firstL, f), append(latL, l...)
		f, l = measure(forwarded.s, "bf")
		firstF, latF = append(firstF, f), append(latF, l...)
	}
	b.StopTimer()
	if len(latD) < 6 || len(latL) < 6 || len(latF) < 6 {
		b.Fatalf("too few colour changes seen: docker %d, lent %d, forwarded %d", len(latD), len(latL), len(latF))
	}
	b.ReportMetric(median(firstL), "lent-first-frame-ms")
	b.ReportMetric(median(firstF), "forwarded-first-frame-ms")
	b.ReportMetric(median(firstD), "base-first-frame-ms")
	b.ReportMetric(median(latL), "lent-latency-median-ms")
	b.ReportMetric(median(latF), "forwarded-latency-median-ms")
	b.ReportMetric(median(latD), "base-latency-median-ms")
	b.ReportMetric(median(latF)/median(latD), "ratio")
	b.ReportMetric(0, "ns/op")
	b.Logf("first frame: docker %.0f ms, lent %.0f ms, forwarded %.0f ms; latency median: docker %.0f ms (%d), lent %.0f ms (%d), forwarded %.0f ms (%d)",
		median(firstD), median(firstL), median(firstF), median(latD), len(latD), median(latL), len(latL), median(latF), len(latF))
}

// consoleGet signs in to the console at base with key, as a browser
// would, and returns the text of the page at path.
func consoleGet(t *testing.T, base, key, path string) string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.PostForm(base+"/signin", url.Values{"key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("console sign in: %d", resp.StatusCode)
	}
	resp, err = c.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("console %s: %d\n%s", path, resp.StatusCode, b)
	}
	return string(b)
}
