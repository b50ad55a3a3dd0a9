package e2e

import (
	"bytes"
	"context"
	"image/png"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/hostnet"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/e2b"
	"github.com/berthdev/berth/providers/e2b/e2bfake"
	"github.com/berthdev/berth/relay/turnserver"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/liveview"
	"github.com/berthdev/berth/supervisor/supervisortest"
)

// TestLiveViewHosted watches and drives a desktop computer on a hosted
// provider: E2B's fake, whose sandbox from the desktop template runs a
// real computerd serving a real X display (an Xvfb of the test's, as the
// desktop image's computerd serves its own). The supervisor reaches that
// computerd only through the provider's transport, with the connection's
// key; live view signals through it, and the picture goes through a TURN
// relay the computer finds in TURN_PUBLIC_HOST, as a hosted sandbox finds
// the supervisor's public relay.
func TestLiveViewHosted(t *testing.T) {
	requireChromium(t)
	testkit.RequireTools(t, "apt-get install -y xvfb ffmpeg x11-utils x11-xserver-utils xdotool", "Xvfb", "ffmpeg", "xdpyinfo", "xsetroot", "xdotool")
	heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	disp := testkit.StartXvfb(t, 1280, 720)

	// The relay, on loopback, which the in-process computer reaches.
	const secret = "e2e-turn-secret-0123456789"
	pc, ln, err := hostnet.ListenUDPTCP("127.0.0.1", "0")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := turnserver.New(turnserver.Config{Secret: []byte(secret), RelayIP: netip.MustParseAddr("127.0.0.1"),
		PacketConns: []net.PacketConn{pc}, Listeners: []net.Listener{ln}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	turnPort := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)

	const key = "e2b_hosted_desktop_key"
	f := e2bfake.New(t, key, "berth-headless", "berth-desktop")
	f.Screens = map[string]string{"berth-desktop": disp}
	p, err := e2b.New(e2b.Options{APIURL: f.URL, Domain: e2bfake.Domain, Scheme: "http",
		HeadlessTemplate: "berth-headless", DesktopTemplate: "berth-desktop", Transport: f.Transport(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s := supervisortest.Start(t, supervisortest.Options{
		Providers: map[string]providers.Provider{"e2b": p}, Logger: log,
		Configure: func(c *supervisor.Config) {
			c.ComputerEnv = map[string]string{desktop.EnvTURNHost: "127.0.0.1", desktop.EnvTURNPort: turnPort, desktop.EnvIdleStop: "1500"}
		},
	})
	lease := 600
	s.Agent(t, "hd", "", &supervisor.ConnectRequest{Provider: "e2b", Image: providers.ImageDesktop, LeaseSeconds: &lease,
		Credentials: map[string]string{e2b.CredAPIKey: key}})
	lv, err := liveview.New(liveview.Config{Store: s.Store, Tokens: s.Tokens, Transport: s.Service.ComputerTransport,
		TURNSecret: []byte(secret), ViewerTURN: []string{"turn:127.0.0.1:" + turnPort + "?transport=udp"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	views := httptest.NewServer(lv.Handler())
	t.Cleanup(views.Close)

	cl, err := api.New(s.URL, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := cl.Start(ctx, "hd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Stop(context.Background(), "hd") })
	if sess.Provider != "e2b" || sess.Image != providers.ImageDesktop {
		t.Fatalf("start: %+v", sess)
	}
	m, err := s.Store.LiveSession(ctx, "hd")
	if err != nil {
		t.Fatal(err)
	}
	if u := "http://7070-" + m.MachineID + "." + e2bfake.Domain; m.Endpoint != u {
		t.Fatalf("the computer's endpoint %q, want the sandbox's port URL %s (reached only through the provider)", m.Endpoint, u)
	}

	g, err := lv.Issue(ctx, "hd", views.URL)
	if err != nil {
		t.Fatal(err)
	}
	bctx := browser(t, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(g.URL)); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, bctx, 30*time.Second, func(v viewState) bool { return v.FramesDecoded > 0 && v.LocalCandidateType != "" })
	t.Logf("viewer: %+v", v)
	if v.LocalCandidateType != "relay" || v.Width != 1280 || v.Height != 720 {
		t.Errorf("viewer %+v: want a 1280x720 picture through the relay", v)
	}
	x, err := cl.Exec(ctx, "hd", api.ExecRequest{Command: "xsetroot -solid '#ff00ff'"})
	if err != nil || x.ExitCode != 0 {
		t.Fatalf("xsetroot in the sandbox: %+v %v", x, err)
	}
	waitColour(t, bctx, [3]int{255, 0, 255}, 10*time.Second)

	// The desktop tools, through the provider's transport.
	shot, err := cl.DesktopScreenshot(ctx, "hd", api.ScreenshotRequest{Format: "png", Width: 320})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot.Data))
	if err != nil {
		t.Fatalf("screenshot of the hosted desktop: %v", err)
	}
	if r, gr, b, _ := img.At(10, 10).RGBA(); img.Bounds().Dx() != 320 || r>>8 < 240 || gr>>8 > 16 || b>>8 < 240 {
		t.Errorf("screenshot %v, pixel (10,10) %d,%d,%d: want 320 wide and magenta", img.Bounds(), r>>8, gr>>8, b>>8)
	}
	res, err := cl.DesktopMouse(ctx, "hd", api.MouseRequest{Action: "move", Coordinate: []int{100, 50}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cursor) != 2 || res.Cursor[0] != 100 || res.Cursor[1] != 50 {
		t.Errorf("pointer after a move: %v, want [100 50]", res.Cursor)
	}
	if _, err := cl.Stop(ctx, "hd"); err != nil {
		t.Fatal(err)
	}
	if _, err := lv.Issue(ctx, "hd", views.URL); err == nil {
		t.Error("a view link was issued after the session stopped")
	}
}
