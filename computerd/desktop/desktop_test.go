package desktop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"go.uber.org/goleak"

	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay/turnserver"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/pion/ice/v4.(*Agent).startConnectivityChecks.func1"))
}

var secret = []byte("desktop-test-turn-secret")

type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// needTools skips without Xvfb and ffmpeg, unless Docker tests are
// required (CI installs both).
func needTools(t *testing.T) {
	t.Helper()
	testkit.RequireTools(t, "apt-get install -y xvfb ffmpeg x11-utils", "Xvfb", "ffmpeg", "xdpyinfo")
}

func turnServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := turnserver.New(turnserver.Config{Secret: secret, RelayIP: netip.MustParseAddr("127.0.0.1"), PacketConns: []net.PacketConn{pc},
		Logger: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return pc.LocalAddr().String()
}

// viewer is a pion peer connection that watches relay-only.
type viewer struct {
	pc     *webrtc.PeerConnection
	frames atomic.Int64
	bytes  atomic.Int64
}

func watch(t *testing.T, ctx context.Context, base, turnAddr, codec string, id ...string) (*viewer, desktop.OfferAnswer) {
	t.Helper()
	vc, _ := turnserver.Issue(secret, "viewer", time.Now(), time.Minute)
	cc, _ := turnserver.Issue(secret, "computer", time.Now(), time.Minute)
	var m webrtc.MediaEngine
	if err := m.RegisterDefaultCodecs(); err != nil {
		t.Fatal(err)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(&m))
	pc, err := api.NewPeerConnection(webrtc.Configuration{
		ICEServers:         []webrtc.ICEServer{{URLs: []string{"turn:" + turnAddr + "?transport=udp"}, Username: vc.Username, Credential: vc.Password}},
		ICETransportPolicy: webrtc.ICETransportPolicyRelay,
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &viewer{pc: pc}
	t.Cleanup(func() { pc.Close() })
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			v.bytes.Add(int64(len(p.Payload)))
			if p.Marker {
				v.frames.Add(1)
			}
		}
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	pc.SetLocalDescription(offer)
	<-done
	body, _ := json.Marshal(desktop.OfferRequest{SDP: pc.LocalDescription().SDP, Codec: codec, Viewer: strings.Join(id, ""),
		ICEServers: []desktop.ICEServer{{URLs: []string{"turn:" + turnAddr + "?transport=udp"}, Username: cc.Username, Credential: cc.Password}}})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+desktop.PathOffer, bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a desktop.OfferAnswer
	if resp.StatusCode != 200 {
		var e map[string]any
		json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("offer: %d %v", resp.StatusCode, e)
	}
	json.NewDecoder(resp.Body).Decode(&a)
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: a.SDP}); err != nil {
		t.Fatal(err)
	}
	return v, a
}

// TestStreamThroughTURN: a real screen (Xvfb), real ffmpeg, and a pion
// viewer relaying through the TURN server on loopback; two viewers share
// one encoder, and the encoder stops the idle time after the last leaves.
func TestStreamThroughTURN(t *testing.T) {
	needTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	disp := testkit.StartXvfb(t, 640, 360)
	turnAddr := turnServer(t)
	d := desktop.New(desktop.Config{Display: disp, Width: 640, Height: 360, IdleStop: 700 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()

	for _, codec := range []string{desktop.CodecH264, desktop.CodecVP8} {
		t.Run(codec, func(t *testing.T) {
			v1, a := watch(t, ctx, srv.URL, turnAddr, codec)
			if a.Codec != codec {
				t.Fatalf("codec %q, want %q", a.Codec, codec)
			}
			testkit.Eventually(t, 15*time.Second, "frames at the first viewer", func() bool { return v1.frames.Load() > 3 })
			v2, _ := watch(t, ctx, srv.URL, turnAddr, codec)
			testkit.Eventually(t, 15*time.Second, "frames at the second viewer", func() bool { return v2.frames.Load() > 3 })
			st := d.Status()
			if len(st.Encoders) != 1 || st.Encoders[0].Viewers != 2 {
				t.Fatalf("status %+v: want one encoder shared by two viewers", st)
			}
			pid := st.Encoders[0].PID
			v1.pc.Close()
			v2.pc.Close()
			// Leaving is seen at once, or when ICE times out (6 s).
			testkit.Eventually(t, 10*time.Second, "encoder stop after the last viewer", func() bool {
				return len(d.Status().Encoders) == 0 && syscall.Kill(pid, 0) != nil
			})
		})
	}
}

// TestReconnectReplaces: a viewer that connects again under the same id
// replaces its old connection instead of holding two.
func TestReconnectReplaces(t *testing.T) {
	needTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	disp := testkit.StartXvfb(t, 320, 240)
	turnAddr := turnServer(t)
	d := desktop.New(desktop.Config{Display: disp, Width: 320, Height: 240, Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	v1, _ := watch(t, ctx, srv.URL, turnAddr, "", "w1")
	testkit.Eventually(t, 15*time.Second, "frames at the first connection", func() bool { return v1.frames.Load() > 0 })
	v2, _ := watch(t, ctx, srv.URL, turnAddr, "", "w1")
	testkit.Eventually(t, 15*time.Second, "frames at the second connection", func() bool { return v2.frames.Load() > 0 })
	if st := d.Status(); st.Viewers != 1 {
		t.Errorf("viewers = %d after the same viewer connected again, want 1", st.Viewers)
	}
}

// TestScreenshot answers a PNG of the screen's size.
func TestScreenshot(t *testing.T) {
	needTools(t)
	disp := testkit.StartXvfb(t, 320, 240)
	d := desktop.New(desktop.Config{Display: disp, Width: 320, Height: 240})
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	resp, err := http.Get(srv.URL + desktop.PathScreenshot)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || !strings.HasPrefix(b.String(), "\x89PNG") {
		t.Fatalf("screenshot: %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), b.String()[:min(16, b.Len())])
	}
}

// TestIdleStop: a warm request starts the encoder; it stops when the idle
// time has passed on the clock with no viewer, and not before.
func TestIdleStop(t *testing.T) {
	needTools(t)
	disp := testkit.StartXvfb(t, 320, 240)
	clk := clock.NewFake(time.Now())
	d := desktop.New(desktop.Config{Display: disp, Width: 320, Height: 240, IdleStop: time.Minute, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	c := desktop.NewClient(srv.URL, "", nil, nil)
	st, err := c.Warm(context.Background(), desktop.WarmRequest{})
	if err != nil || len(st.Encoders) != 1 || st.Encoders[0].Codec != desktop.CodecH264 {
		t.Fatalf("warm: %+v %v", st, err)
	}
	pid := st.Encoders[0].PID
	// A second warm request shares the encoder and restarts the idle time.
	clk.Advance(50 * time.Second)
	if st, _ := c.Warm(context.Background(), desktop.WarmRequest{}); len(st.Encoders) != 1 || st.Encoders[0].PID != pid {
		t.Fatalf("second warm: %+v, want the same encoder %d", st, pid)
	}
	clk.Advance(50 * time.Second)
	time.Sleep(100 * time.Millisecond)
	if syscall.Kill(pid, 0) != nil || len(d.Status().Encoders) != 1 {
		t.Fatalf("the encoder stopped before the idle time since the last request")
	}
	clk.Advance(11 * time.Second)
	testkit.Eventually(t, 5*time.Second, "encoder stop", func() bool { return len(d.Status().Encoders) == 0 && syscall.Kill(pid, 0) != nil })
	// Bad input is refused with the field named.
	if _, err := c.Warm(context.Background(), desktop.WarmRequest{Codec: "av1"}); err == nil || !strings.Contains(err.Error(), "codec") {
		t.Errorf("warm av1: %v", err)
	}
}
