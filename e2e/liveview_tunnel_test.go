package e2e

import (
	"bytes"
	"context"
	"image/png"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/agent/tunnel"
	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/supervisor/daemon"
	"github.com/berthdev/berth/supervisor/liveview"
)

// TestLiveViewTunnel watches a desktop computer behind `berth agent
// tunnel`, and drives it with the desktop tools. The supervisor's TURN
// relay listens on loopback, which the computer cannot reach; the runner
// forwards a port on its docker0 address to the relay its owner named
// (--turn-relay) and gives the computer that one, never the relay the
// supervisor names in its claim. The viewer page decodes the screen
// through TURN, signalled through the tunnel with the connection's key.
func TestLiveViewTunnel(t *testing.T) {
	requireDocker(t, desktopImage)
	requireChromium(t)
	heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	s, _ := serveDaemon(t, daemon.Options{
		Egress:    daemon.EgressOptions{Listen: ":0"},
		LiveView:  daemon.LiveViewOptions{Listen: "127.0.0.1:0", DesktopUsers: 2, IdleStopMS: idleStopMS, Secret: "e2e-turn-secret-0123456789"},
		Providers: []string{"tunnel"}, DefaultProvider: "tunnel",
	}, map[string]string{})
	relay := s.d.TURNRelay()

	info, stop := runTunnel(t, ctx, tunnel.Options{
		Lifetime:  3 * time.Minute,
		Docker:    docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: desktopImage, MemoryMB: 1024},
		Image:     "desktop",
		TURNRelay: relay,
	})
	if info.TURN == "" {
		t.Fatal("the desktop runner has no TURN forwarder")
	}
	_, fport, _ := net.SplitHostPort(info.TURN)
	port, _ := strconv.Atoi(fport)
	t.Cleanup(func() { docker.UnguardTURN(context.Background(), port) })
	opened := func(proto string) error {
		return exec.Command("iptables", "-w", "5", "-C", "INPUT", "-i", docker.BridgePrefix+"+", "-p", proto, "--dport", fport,
			"-m", "comment", "--comment", "berth: live-view TURN relay", "-j", "ACCEPT").Run()
	}
	for _, proto := range []string{"udp", "tcp"} {
		if err := opened(proto); err != nil {
			t.Errorf("no %s opening for the forwarder's port %s: %v", proto, fport, err)
		}
	}

	s.must("POST", "/v1/agents", map[string]any{"id": "tv", "name": "tv"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "tv", "provider": "tunnel", "image": "desktop", "leaseSeconds": 600,
		"credentials": map[string]string{"url": info.URL, "apiKey": info.Token}}, 201, nil)
	var sess session
	s.must("POST", "/v1/agents/tv/computer/start", nil, 200, &sess)
	t.Cleanup(func() { s.call("POST", "/v1/agents/tv/computer/stop", nil, nil) })

	// The computer has the runner's forwarder, not the relay the
	// supervisor named.
	hostPort := strings.Fields(s.exec("tv", "echo $TURN_PUBLIC_HOST $TURN_PORT").Stdout)
	if len(hostPort) != 2 || net.JoinHostPort(hostPort[0], hostPort[1]) != info.TURN {
		t.Fatalf("TURN_PUBLIC_HOST and TURN_PORT in the tunnelled computer: %q, want the runner's forwarder %s (the supervisor's relay is %s)", hostPort, info.TURN, relay)
	}

	var g liveview.Grant
	s.must("POST", "/v1/agents/tv/computer/view", nil, 201, &g)
	if g.Session != sess.ID {
		t.Fatalf("grant %+v for session %s", g, sess.ID)
	}
	bctx := browser(t, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(g.URL)); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, bctx, 45*time.Second, func(v viewState) bool { return v.FramesDecoded > 0 && v.LocalCandidateType != "" })
	t.Logf("viewer: %+v", v)
	if v.LocalCandidateType != "relay" {
		t.Errorf("selected local candidate is %q, want relay", v.LocalCandidateType)
	}
	if x := s.exec("tv", "xsetroot -solid '#00ff00'"); x.ExitCode != 0 {
		t.Fatalf("xsetroot: %+v", x)
	}
	waitColour(t, bctx, [3]int{0, 255, 0}, 10*time.Second)

	// The desktop tools through the tunnel: the screenshot is the screen
	// the viewer shows, and the pointer goes where it is sent.
	cl, err := api.New(s.url, s.token)
	if err != nil {
		t.Fatal(err)
	}
	shot, err := cl.DesktopScreenshot(ctx, "tv", api.ScreenshotRequest{Format: "png", Width: 640})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot.Data))
	if err != nil {
		t.Fatalf("screenshot through the tunnel: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 640 || b.Dy() != 360 || shot.ScreenWidth != 1280 {
		t.Errorf("screenshot %v of a %dx%d screen, want 640x360 of 1280x720", b, shot.ScreenWidth, shot.ScreenHeight)
	}
	if r, gr, bl, _ := img.At(20, 20).RGBA(); r>>8 > 16 || gr>>8 < 240 || bl>>8 > 16 {
		t.Errorf("screenshot pixel (20,20) is %d,%d,%d, want the green root window", r>>8, gr>>8, bl>>8)
	}
	res, err := cl.DesktopMouse(ctx, "tv", api.MouseRequest{Action: "move", Coordinate: []int{301, 157}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cursor) != 2 || res.Cursor[0] != 301 || res.Cursor[1] != 157 {
		t.Errorf("pointer after a move through the tunnel: %v, want [301 157]", res.Cursor)
	}

	// The runner closes its forwarder's port when it stops.
	s.must("POST", "/v1/agents/tv/computer/stop", nil, 200, nil)
	stop()
	for _, proto := range []string{"udp", "tcp"} {
		if opened(proto) == nil {
			t.Errorf("the forwarder's %s opening on port %s is still there after the runner stopped", proto, fport)
		}
	}
}
