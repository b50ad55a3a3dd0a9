package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/daemon"
)

// startDesktopSupervisor runs an in-process supervisor with the docker
// provider and desktop computers, without live view: the desktop tools
// need none.
func startDesktopSupervisor(t testing.TB) *super {
	t.Helper()
	s, _ := serveDaemon(t, daemon.Options{Egress: daemon.EgressOptions{Listen: ":0"}},
		map[string]string{"COMPUTER_IMAGE_DESKTOP": desktopImage, "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "1"})
	return s
}

// typedText is typed into an xterm through computer_action and must come
// out of it byte for byte: accents, a dash, CJK and a symbol no keyboard
// map has.
const typedText = "héllo wörld — 日本 ✓"

// windowGeometry matches a line of `xwininfo -tree`: WxH+x+y  +absX+absY.
var windowGeometry = regexp.MustCompile(`(\d+)x(\d+)\+-?\d+\+-?\d+\s+\+(-?\d+)\+(-?\d+)\s*$`)

// lastChild returns the centre, in screen pixels, of the last window that
// `xwininfo -tree` lists under the named window (xmessage's button is the
// last child of its form), once the window manager has framed and shown
// the window and two readings in a row agree: openbox reparents a window
// into its frame before it moves the frame to the asked-for place, so a
// single reading can catch the window at the frame's first place.
func lastChild(t *testing.T, s *super, agent, name string) (int, int) {
	t.Helper()
	var x, info execResult
	var cx, cy, lastX, lastY int
	framedRE := regexp.MustCompile(`Parent window id: \S+ \(the root window\)`)
	found := func() bool {
		if info = s.exec(agent, "xwininfo -name "+name); !strings.Contains(info.Stdout, "Map State: IsViewable") {
			lastX, lastY = 0, 0
			return false
		}
		x = s.exec(agent, "xwininfo -name "+name+" -tree")
		cx, cy = 0, 0
		for line := range strings.Lines(x.Stdout) {
			if m := windowGeometry.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
				w, _ := strconv.Atoi(m[1])
				h, _ := strconv.Atoi(m[2])
				ax, _ := strconv.Atoi(m[3])
				ay, _ := strconv.Atoi(m[4])
				cx, cy = ax+w/2, ay+h/2
			}
		}
		framed := !framedRE.MatchString(x.Stdout)
		if x.ExitCode != 0 || !framed || (cx == 0 && cy == 0) {
			lastX, lastY = 0, 0
			return false
		}
		settled := cx == lastX && cy == lastY
		lastX, lastY = cx, cy
		return settled
	}
	if !testkit.Poll(20*time.Second, found) {
		logs := s.exec(agent, "cat /tmp/xmessage.log; xwininfo -root -tree | head -40")
		t.Fatalf("no settled child window of %s; xwininfo says:\n%s%s\nits tree:\n%s\nxmessage's log and the screen's windows:\n%s%s",
			name, info.Stdout, info.Stderr, x.Stdout, logs.Stdout, logs.Stderr)
	}
	return cx, cy
}

// TestDesktopToolsOverMCP drives a real desktop computer through the MCP
// tools computer_screenshot and computer_action from the go-sdk client, as
// a computer-use agent would: it reads a scaled screenshot, clicks an X
// program's button at the screenshot's coordinates (the program's own
// output proves the click) and types Unicode text into an xterm, which
// writes it to a file compared byte for byte. REST's action route answers
// an off-screen coordinate with a 400, and the next call works.
func TestDesktopToolsOverMCP(t *testing.T) {
	requireDocker(t, desktopImage)
	heavy(t)
	s := startDesktopSupervisor(t)
	const agent = "desk"
	// Two callers use the desktop: the MCP server and this test over REST.
	startDesktopFor(s, agent, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	cmd := exec.Command(berthBin, "mcp", "--agent", agent)
	cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s %v: %s", name, args, texts(res))
		}
		t.Logf("%s %v -> %s", name, args, texts(res))
		return res
	}

	// A program with a button and one that reads a line of text.
	if x := s.exec(agent, `rm -f /tmp/pressed /tmp/typed
nohup xmessage -print -buttons Press:0 -geometry +100+100 hello >/tmp/pressed 2>/tmp/xmessage.log &
nohup xterm -u8 -T typer -geometry 80x5+400+300 -e sh -c 'read -r l; printf %s "$l" > /tmp/typed' >/dev/null 2>&1 &`); x.ExitCode != 0 {
		t.Fatalf("start the programs: %+v", x)
	}
	bx, by := lastChild(t, s, agent, "xmessage")
	tx, ty := lastChild(t, s, agent, "typer")
	t.Logf("button at %d,%d; xterm at %d,%d (screen pixels)", bx, by, tx, ty)

	// The screenshot, scaled to half the screen's width.
	res := call("computer_screenshot", map[string]any{"width": 640})
	img := imageOf(t, res)
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("decode the screenshot: %v", err)
	}
	if b := pic.Bounds(); b.Dx() != 640 || b.Dy() != 360 {
		t.Fatalf("screenshot %v, want 640x360", b)
	}
	if text := texts(res); !strings.Contains(text, "1280x720 screen, scale 0.5") {
		t.Fatalf("screenshot text: %s", text)
	}
	// The screenshot shows the window, not the desktop's background
	// (#2e3440), at the button's scaled place.
	if r, g, b, _ := pic.At(bx/2, by/2).RGBA(); r>>8 == 0x2e && g>>8 == 0x34 && b>>8 == 0x40 {
		t.Errorf("the screenshot shows the background at the button's scaled place (%d,%d)", bx/2, by/2)
	}

	// Click the button at the screenshot's coordinates.
	res = call("computer_action", map[string]any{"action": "left_click", "coordinate": []int{bx / 2, by / 2}})
	var out struct {
		Cursor       []int   `json:"cursor"`
		ScreenCursor []int   `json:"screenCursor"`
		Scale        float64 `json:"scale"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	if out.Scale != 0.5 || fmt.Sprint(out.Cursor) != fmt.Sprint([]int{bx / 2, by / 2}) || len(out.ScreenCursor) != 2 ||
		out.ScreenCursor[0]-bx < -1 || out.ScreenCursor[0]-bx > 1 || out.ScreenCursor[1]-by < -1 || out.ScreenCursor[1]-by > 1 {
		t.Fatalf("left_click answered %s, want the cursor at %d,%d (scale 0.5) and near %d,%d on the screen", raw, bx/2, by/2, bx, by)
	}
	testkit.Eventually(t, 10*time.Second, "xmessage to print Press", func() bool {
		return s.exec(agent, "cat /tmp/pressed").Stdout == "Press\n"
	})

	// Click into the xterm, type, press Return.
	call("computer_action", map[string]any{"action": "left_click", "coordinate": []int{tx / 2, ty / 2}})
	call("computer_action", map[string]any{"action": "type", "text": typedText})
	call("computer_action", map[string]any{"action": "key", "text": "Return"})
	var typed string
	testkit.Eventually(t, 10*time.Second, "the xterm to write /tmp/typed", func() bool {
		x := s.exec(agent, "test -f /tmp/typed && cat /tmp/typed")
		typed = x.Stdout
		return x.ExitCode == 0
	})
	if typed != typedText {
		t.Fatalf("typed %q (% x), want %q (% x)", typed, typed, typedText, typedText)
	}
	res = call("computer_action", map[string]any{"action": "cursor_position"})
	if text := texts(res); !strings.Contains(text, fmt.Sprintf("[%d %d]", tx/2, ty/2)) {
		t.Errorf("cursor_position: %s, want [%d %d]", text, tx/2, ty/2)
	}

	// The final screen, kept for people to look at.
	final := imageOf(t, call("computer_action", map[string]any{"action": "screenshot"}))
	path := filepath.Join(t.ArtifactDir(), "desktop-final.png")
	if err := os.WriteFile(path, final, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("final screenshot: %s", path)

	// The browser tools on the desktop: the agent's Chromium opens on the
	// screen, so the page it drives is the page the screenshot shows.
	if x := s.exec(agent, `mkdir -p /tmp/site && cat > /tmp/site/index.html <<'EOF'
<!doctype html><title>Desk page</title>
<style>html,body{margin:0;height:100%;background:#12ab34}</style>
<h1>On the desktop</h1><button onclick="document.querySelector('h1').textContent='Clicked on the desktop'">Change</button>
EOF
nohup python3 -m http.server 8011 --bind 127.0.0.1 -d /tmp/site >/dev/null 2>&1 &`); x.ExitCode != 0 {
		t.Fatalf("serve a page: %+v", x)
	}
	testkit.Eventually(t, 10*time.Second, "the page server", func() bool {
		return s.exec(agent, "curl -s --noproxy '*' http://127.0.0.1:8011/ | grep -q Desk").ExitCode == 0
	})
	call("browser_navigate", map[string]any{"url": "http://127.0.0.1:8011/"})
	snap := texts(call("browser_snapshot", nil))
	ref := regexp.MustCompile(`button "Change".*?\[ref=(e\d+)\]`).FindStringSubmatch(snap)
	if !strings.Contains(snap, `heading "On the desktop"`) || ref == nil {
		t.Fatalf("browser_snapshot on the desktop: %s", snap)
	}
	call("browser_click", map[string]any{"ref": ref[1]})
	if snap := texts(call("browser_snapshot", nil)); !strings.Contains(snap, `heading "Clicked on the desktop"`) {
		t.Fatalf("after browser_click: %s", snap)
	}
	var green float64
	testkit.Eventually(t, 15*time.Second, "the browser's page on the screen", func() bool {
		pic, err := png.Decode(bytes.NewReader(imageOf(t, call("computer_screenshot", map[string]any{"width": 320}))))
		if err != nil {
			t.Fatalf("decode the screenshot: %v", err)
		}
		n, all := 0, 0
		for y := pic.Bounds().Min.Y; y < pic.Bounds().Max.Y; y += 2 {
			for x := pic.Bounds().Min.X; x < pic.Bounds().Max.X; x += 2 {
				r, g, b, _ := pic.At(x, y).RGBA()
				if near([]int{int(r >> 8), int(g >> 8), int(b >> 8)}, [3]int{0x12, 0xab, 0x34}) {
					n++
				}
				all++
			}
		}
		green = float64(n) / float64(all)
		return green > 0.2
	})
	t.Logf("the page's colour covers %.0f%% of the screen", green*100)
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "desktop-browser.png"), imageOf(t, call("computer_screenshot", nil)), 0o644); err != nil {
		t.Fatal(err)
	}

	// REST: bad input is a 400 naming the field, and the next call works.
	var e struct {
		Error struct{ Code, Message string }
	}
	base := "/v1/agents/" + agent + "/computer/desktop/action"
	if st := s.call("POST", base, map[string]any{"action": "left_click", "coordinate": []int{5000, 10}}, &e); st != 400 ||
		!strings.HasPrefix(e.Error.Message, "coordinate: [5000, 10] is off the 1280x720 screen") {
		t.Fatalf("off-screen click: %d %+v", st, e)
	}
	if st := s.call("POST", base, map[string]any{"action": "fly"}, &e); st != 400 ||
		!strings.Contains(e.Error.Message, `action: "fly" is not one of screenshot, cursor_position, mouse_move, left_click`) {
		t.Fatalf("unknown action: %d %+v", st, e)
	}
	if st := s.call("POST", base, map[string]any{"action": "mouse_move"}, &e); st != 400 || !strings.HasPrefix(e.Error.Message, "coordinate: required") {
		t.Fatalf("mouse_move without a coordinate: %d %+v", st, e)
	}
	if st := s.call("POST", base, map[string]any{"action": "key", "text": "Enterr"}, &e); st != 400 || !strings.HasPrefix(e.Error.Message, `text: unknown key name "Enterr"`) {
		t.Fatalf("an unknown key: %d %+v", st, e)
	}
	var moved struct {
		X, Y  *int
		Scale float64
	}
	s.must("POST", base, map[string]any{"action": "mouse_move", "coordinate": []int{200, 100}, "scale": 0.5}, 200, &moved)
	if moved.X == nil || *moved.X != 200 || *moved.Y != 100 || moved.Scale != 0.5 {
		t.Fatalf("mouse_move after the errors: %+v", moved)
	}
	var shot struct {
		Image                     []byte
		Width, Height             int
		ScreenWidth, ScreenHeight int
		Format                    string
	}
	s.must("POST", base, map[string]any{"action": "screenshot", "width": 320, "format": "jpeg"}, 200, &shot)
	if shot.Width != 320 || shot.Height != 180 || shot.ScreenWidth != 1280 || shot.Format != "jpeg" || !bytes.HasPrefix(shot.Image, []byte{0xff, 0xd8}) {
		t.Fatalf("screenshot action: %dx%d of %dx%d %s, %d bytes", shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight, shot.Format, len(shot.Image))
	}

	// Both seats are held (the MCP server's and this test's): a third
	// caller is refused.
	req, _ := http.NewRequestWithContext(ctx, "POST", s.url+base, strings.NewReader(`{"action":"cursor_position"}`))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Berth-Desktop-Holder", "a-third-caller")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != 409 || !strings.Contains(string(body), `"desktop_busy"`) {
		t.Fatalf("a third caller with desktopUsers 2: %d %s, want 409 desktop_busy", resp.StatusCode, body)
	}
}

// texts joins a tool result's text parts.
func texts(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// imageOf returns a tool result's PNG image.
func imageOf(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			if ic.MIMEType != "image/png" {
				t.Fatalf("image %s, want image/png", ic.MIMEType)
			}
			return ic.Data
		}
	}
	t.Fatalf("no image in %s", texts(res))
	return nil
}

// postRaw sends a JSON POST with the operator token and returns the status
// and the body as it came.
func postRaw(ctx context.Context, s *super, path string, body any) (int, []byte, error) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// desktopBench is a running desktop computer for the desktop tools'
// benchmarks.
func desktopBench(b *testing.B, agent string) (*super, context.Context) {
	b.Helper()
	requireDocker(b, desktopImage)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(b.N)*5*time.Second)
	b.Cleanup(cancel)
	s := startDesktopSupervisor(b)
	startDesktop(s, agent)
	testkit.Eventually(b, 20*time.Second, "the X server", func() bool { return s.exec(agent, "xwininfo -root >/dev/null").ExitCode == 0 })
	return s, ctx
}

// BenchmarkDesktopScreenshot times a 1280x720 PNG screenshot through REST
// (POST .../desktop/screenshot) against a screenshot the agent could take
// without the tool in the same computer: ffmpeg's x11grab grabbing the
// root window into a PNG file, run through the REST exec. It stands in for
// ImageMagick's `import -window root`, which the image does not carry
// (nor xwd); ffmpeg is there, for live view.
func BenchmarkDesktopScreenshot(b *testing.B) {
	const agent = "benchshot"
	s, ctx := desktopBench(b, agent)
	// A screen with something on it to encode.
	s.exec(agent, `nohup xterm -geometry 100x40+40+40 -e sh -c 'ls -lR /usr/share | head -200; sleep 3600' >/dev/null 2>&1 &`)
	time.Sleep(time.Second)
	shot := func() time.Duration {
		start := time.Now()
		st, data, err := postRaw(ctx, s, "/v1/agents/"+agent+"/computer/desktop/screenshot", map[string]any{"format": "png"})
		if err != nil || st != 200 {
			b.Fatalf("screenshot: %d %v %.200s", st, err, data)
		}
		if cfg, err := png.DecodeConfig(bytes.NewReader(data)); err != nil || cfg.Width != 1280 || cfg.Height != 720 {
			b.Fatalf("screenshot: %+v %v", cfg, err)
		}
		return time.Since(start)
	}
	execTimed := func(cmd string) func() time.Duration {
		return func() time.Duration {
			start := time.Now()
			if x := s.exec(agent, cmd); x.ExitCode != 0 {
				b.Fatalf("%s: %+v", cmd, x)
			}
			return time.Since(start)
		}
	}
	ffmpeg := execTimed("ffmpeg -hide_banner -loglevel error -f x11grab -video_size 1280x720 -i :0 -frames:v 1 -c:v png -f image2 -y /tmp/shot.png")
	shot()
	ffmpeg()
	pairedRuns(b, "rest-screenshot-ms", shot, "base-ffmpeg-x11grab-png-ms", ffmpeg)
}

// BenchmarkDesktopClick times a left_click round trip through REST
// (POST .../desktop/action) against an exec of `true` through REST.
func BenchmarkDesktopClick(b *testing.B) {
	const agent = "benchclick"
	s, ctx := desktopBench(b, agent)
	click := func() time.Duration {
		start := time.Now()
		st, data, err := postRaw(ctx, s, "/v1/agents/"+agent+"/computer/desktop/action", map[string]any{"action": "left_click", "coordinate": []int{900, 600}})
		if err != nil || st != 200 {
			b.Fatalf("left_click: %d %v %s", st, err, data)
		}
		return time.Since(start)
	}
	execTrue := func() time.Duration {
		start := time.Now()
		if x := s.exec(agent, "true"); x.ExitCode != 0 {
			b.Fatalf("true: %+v", x)
		}
		return time.Since(start)
	}
	click()
	execTrue()
	pairedRuns(b, "rest-click-ms", click, "base-exec-true-ms", execTrue)
}
