package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/pion/turn/v5"

	"github.com/berthdev/berth/relay/turnserver"
	"github.com/berthdev/berth/supervisor/daemon"
	"github.com/berthdev/berth/supervisor/liveview"
)

const (
	desktopImage = "berth/desktop:latest"
	chromiumPath = "/usr/bin/chromium"
	idleStopMS   = 1500
)

// startLiveSupervisor runs an in-process supervisor with the docker
// provider, desktop computers, and live view: the TURN relay on the
// docker0 address (which computers and this host both reach) on a free
// port, at most two viewers per desktop, and a short encoder idle stop.
func startLiveSupervisor(t testing.TB) *super {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	env := map[string]string{"COMPUTER_IMAGE_DESKTOP": desktopImage, "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "1"}
	d, err := daemon.New(ctx, daemon.Options{
		Egress:   daemon.EgressOptions{Listen: ":0"},
		LiveView: daemon.LiveViewOptions{Listen: ":0", DesktopUsers: 2, IdleStopMS: idleStopMS, Secret: "e2e-turn-secret-0123456789"},
		DataDir:  t.TempDir(), Token: "e2e-operator-token-0123456789",
		Getenv: func(k string) string { return env[k] },
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.ServeListener(ctx, ln, 5*time.Second, nil) }()
	s := &super{t: t, url: "http://" + ln.Addr().String(), token: d.Token, d: d}
	t.Cleanup(func() {
		cancel()
		<-done
		d.Close()
	})
	return s
}

// startDesktop connects agent to a desktop computer and starts it.
func startDesktop(s *super, agent string) string {
	s.t.Helper()
	s.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "docker", "image": "desktop", "leaseSeconds": 600}, 201, nil)
	var sess struct{ ID string }
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, &sess)
	s.t.Cleanup(func() { s.call("POST", "/v1/agents/"+agent+"/computer/stop", nil, nil) })
	return sess.ID
}

// requireChromium skips without Debian's chromium, unless Docker tests are
// required (CI), where it fails.
func requireChromium(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("BERTH_REQUIRE_DOCKER") == "1" {
			t.Fatalf("%s missing: apt-get install chromium (.ci/run does)", chromiumPath)
		}
		t.Skipf("%s missing; apt-get install chromium", chromiumPath)
	}
}

// browser starts headless Chromium with a new, empty profile.
func browser(t testing.TB, ctx context.Context) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// viewState is window.berthView of the viewer page.
type viewState struct {
	State              string  `json:"state"`
	ICEState           string  `json:"iceState"`
	Codec              string  `json:"codec"`
	FramesDecoded      int     `json:"framesDecoded"`
	Width              int     `json:"width"`
	Height             int     `json:"height"`
	FPS                float64 `json:"fps"`
	LocalCandidateType string  `json:"localCandidateType"`
	Error              string  `json:"error"`
}

func pageState(ctx context.Context) (viewState, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[viewState](`window.berthView || {}`))
}

// waitView polls the page until ok holds or the deadline passes.
func waitView(t testing.TB, ctx context.Context, d time.Duration, ok func(viewState) bool) viewState {
	t.Helper()
	deadline := time.Now().Add(d)
	var v viewState
	for time.Now().Before(deadline) {
		var err error
		if v, err = pageState(ctx); err == nil && ok(v) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := exec.Command("sh", "-c", "for c in $(docker ps -q --filter label=dev.berth.managed=true); do docker logs --tail 30 $c 2>&1; done").Output()
	t.Fatalf("viewer page: condition not met in %v; last state %+v\ncomputer logs:\n%s", d, v, out)
	return v
}

// sampleJS draws the current video frame on a canvas and returns the
// colour of a pixel of the root window (the middle of the left edge).
const sampleJS = `(() => {
  const v = document.getElementById("video");
  if (!v.videoWidth) return [];
  const c = document.createElement("canvas");
  c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext("2d");
  g.drawImage(v, 0, 0);
  return Array.from(g.getImageData(8, Math.floor(v.videoHeight / 2), 1, 1).data.slice(0, 3));
})()`

// waitColour waits until the decoded frames show a colour near want.
func waitColour(t testing.TB, ctx context.Context, want [3]int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var got []int
	for time.Now().Before(deadline) {
		var err error
		if got, err = chromedp.Run(ctx, chromedp.Evaluate[[]int](sampleJS)); err == nil && len(got) == 3 && near(got, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("decoded frames never showed %v; last pixel %v", want, got)
}

func near(got []int, want [3]int) bool {
	for i := range 3 {
		if d := got[i] - want[i]; d > 40 || d < -40 {
			return false
		}
	}
	return true
}

// encoders runs pgrep for ffmpeg in the agent's computer.
func encoders(s *super, agent string) string {
	return strings.TrimSpace(s.exec(agent, "pgrep -x ffmpeg || true").Stdout)
}

// TestLiveView opens a desktop computer's viewer link in headless Chromium
// and checks that the page decodes the screen through the TURN relay,
// that what is drawn on the desktop shows up, and that the encoder stops
// after the last viewer leaves. Then the refusals: a view token for
// another session, the desktop-users limit, a TURN permission for another
// address and an expired TURN credential.
func TestLiveView(t *testing.T) {
	requireDocker(t, desktopImage)
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := startLiveSupervisor(t)
	session := startDesktop(s, "lv")

	var g liveview.Grant
	s.must("POST", "/v1/agents/lv/computer/view", nil, 201, &g)
	if g.Session != session || !strings.Contains(g.URL, "/view/"+session+"?token=") {
		t.Fatalf("grant %+v for session %s", g, session)
	}
	bctx := browser(t, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(g.URL)); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, bctx, 30*time.Second, func(v viewState) bool { return v.FramesDecoded > 0 && v.Width > 0 && v.LocalCandidateType != "" })
	t.Logf("viewer: %+v", v)
	if v.Width != 1280 || v.Height != 720 {
		t.Errorf("video is %dx%d, want the configured 1280x720", v.Width, v.Height)
	}
	if v.LocalCandidateType != "relay" {
		t.Errorf("selected local candidate is %q, want relay", v.LocalCandidateType)
	}
	if v.Codec != "h264" {
		t.Errorf("codec %q, want h264 (Chromium offers it)", v.Codec)
	}

	// What is drawn on the screen shows in the decoded frames.
	for _, c := range []struct {
		hex string
		rgb [3]int
	}{{"#ff0000", [3]int{255, 0, 0}}, {"#00ff00", [3]int{0, 255, 0}}, {"#0000ff", [3]int{0, 0, 255}}} {
		if x := s.exec("lv", "xsetroot -solid '"+c.hex+"'"); x.ExitCode != 0 {
			t.Fatalf("xsetroot: %+v", x)
		}
		waitColour(t, bctx, c.rgb, 10*time.Second)
	}

	t.Run("token for another session", func(t *testing.T) {
		other := startDesktop(s, "lv2")
		var g2 liveview.Grant
		s.must("POST", "/v1/agents/lv2/computer/view", nil, 201, &g2)
		tok := g2.URL[strings.Index(g2.URL, "token="):]
		for _, path := range []string{"/view/" + session + "?" + tok, "/view/" + session + "/config?" + tok, "/view/" + session + "/offer?" + tok} {
			method := "POST"
			if !strings.Contains(path, "/config") && !strings.Contains(path, "/offer") {
				method = "GET"
			}
			req, _ := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(`{"sdp":"v=0"}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s with a token of session %s: status %d, want 403", method, path[:strings.Index(path, "?")], other, resp.StatusCode)
			}
		}
		// Its own session accepts it.
		resp, err := http.Get(s.url + "/view/" + other + "?" + tok)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("the token on its own session: status %d", resp.StatusCode)
		}
	})

	t.Run("desktop users limit", func(t *testing.T) {
		// The page holds one seat; DESKTOP_USERS is 2.
		var g2 liveview.Grant
		s.must("POST", "/v1/agents/lv/computer/view", nil, 201, &g2)
		var e struct {
			Error struct{ Code, Message string }
		}
		if st := s.call("POST", "/v1/agents/lv/computer/view", nil, &e); st != 409 || e.Error.Code != liveview.CodeDesktopBusy {
			t.Fatalf("third viewer: status %d %+v, want 409 %s", st, e, liveview.CodeDesktopBusy)
		}
		t.Logf("refused: %s", e.Error.Message)
		// A viewer leaving frees its seat.
		resp, err := http.Post(s.url+"/view/"+session+"/leave?token="+g2.Token, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		s.must("POST", "/v1/agents/lv/computer/view", nil, 201, &g2)
	})

	t.Run("TURN refusals", func(t *testing.T) {
		ts := s.d.TURN
		addr := net.JoinHostPort(ts.RelayIP().String(), fmt.Sprint(turnPort(t, s)))
		secret := []byte("e2e-turn-secret-0123456789")
		expired, _ := turnserver.Issue(secret, "late", time.Now().Add(-time.Minute), 30*time.Second)
		if _, err := turnClient(t, addr, expired).Allocate(); err == nil {
			t.Errorf("an expired TURN credential got an allocation")
		}
		good, _ := turnserver.Issue(secret, "probe", time.Now(), time.Minute)
		cl := turnClient(t, addr, good)
		relay, err := cl.Allocate()
		if err != nil {
			t.Fatalf("allocate: %v", err)
		}
		defer relay.Close()
		for _, peer := range []string{"8.8.8.8:53", "127.0.0.1:8080", "10.0.0.1:3478"} {
			a, _ := net.ResolveUDPAddr("udp4", peer)
			if err := cl.CreatePermission(a); err == nil {
				t.Errorf("TURN permission for %s granted; only the relay's own address may be a peer", peer)
			}
		}
	})

	t.Run("idle stop", func(t *testing.T) {
		if got := encoders(s, "lv"); got == "" {
			t.Fatalf("no encoder runs while the page watches")
		}
		// The last viewer leaves: the page goes away.
		if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
			t.Fatal(err)
		}
		left := time.Now()
		// Leaving is seen at once (the page closes its connection) or when
		// ICE times out (6 s); then the encoder has idleStopMS to stop.
		deadline := left.Add(idleStopMS*time.Millisecond + 10*time.Second)
		for encoders(s, "lv") != "" {
			if time.Now().After(deadline) {
				t.Fatalf("the encoder still runs %v after the last viewer left (STREAM_IDLE_STOP_MS=%d)", time.Since(left), idleStopMS)
			}
			time.Sleep(200 * time.Millisecond)
		}
		took := time.Since(left)
		t.Logf("encoder gone %v after the last viewer left", took)
		if took < idleStopMS*time.Millisecond {
			t.Errorf("the encoder stopped after %v, before the idle time %d ms", took, idleStopMS)
		}
	})
}

func turnPort(t testing.TB, s *super) int {
	t.Helper()
	var x execResult
	s.must("POST", "/v1/agents/lv/computer/exec", map[string]any{"command": "echo $TURN_PORT"}, 200, &x)
	var p int
	if _, err := fmt.Sscan(x.Stdout, &p); err != nil {
		t.Fatalf("TURN_PORT in the computer: %q", x.Stdout)
	}
	return p
}

func turnClient(t testing.TB, addr string, c turnserver.Credentials) *turn.Client {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: c.Username, Password: c.Password, Realm: turnserver.DefaultRealm, RTO: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); conn.Close() })
	return cl
}
