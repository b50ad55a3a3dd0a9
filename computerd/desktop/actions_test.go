package desktop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

func wantBad(t *testing.T, err error, parts ...string) {
	t.Helper()
	var bad *BadRequestError
	if !errors.As(err, &bad) {
		t.Fatalf("err = %v, want a bad request naming %q", err, parts)
	}
	for _, p := range parts {
		if !strings.Contains(bad.Message, p) {
			t.Errorf("message %q does not name %q", bad.Message, p)
		}
	}
}

func TestParseCombo(t *testing.T) {
	for in, want := range map[string]string{
		"ctrl+c": "Control_L+c", "Return": "Return", "return": "Return", "enter": "Return", "ctrl+shift+t": "Control_L+Shift_L+t",
		"alt+Tab": "Alt_L+Tab", "F5": "F5", "f5": "F5", "super": "Super_L", "Page_Down": "Page_Down", "pagedown": "Next",
		"é": "eacute", "日": "U65E5", "+": "plus", "ctrl+plus": "Control_L+plus", "XF86AudioMute": "XF86AudioMute", "A": "A", "a": "a",
	} {
		ks, err := parseCombo("keys", in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := comboArg(ks); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"ctrl+nosuchkey", "ctrl+", "", "Retrun", "ctrl++"} {
		_, err := parseCombo("keys", in)
		wantBad(t, err, "keys")
	}
	_, err := parseCombo("keys", "ctrl+Retrun")
	wantBad(t, err, `"Retrun"`, "Return")
}

func TestCheckKeyboard(t *testing.T) {
	long := strings.Repeat("é", MaxTypeChars+1)
	for _, c := range []struct {
		r     KeyboardRequest
		parts []string
	}{
		{KeyboardRequest{Action: "type", Text: long}, []string{"text", "10001", "10000"}},
		{KeyboardRequest{Action: "type"}, []string{"text", "required"}},
		{KeyboardRequest{Action: "type", Text: "a\x00"}, []string{"NUL"}},
		{KeyboardRequest{Action: "key"}, []string{"keys", "required"}},
		{KeyboardRequest{Action: "key", Keys: "ctrl+bogus"}, []string{"unknown key name", "bogus"}},
		{KeyboardRequest{Action: "hold_key", Keys: "shift"}, []string{"durationMs"}},
		{KeyboardRequest{Action: "hold_key", Keys: "shift", DurationMs: 30001}, []string{"durationMs", "30000"}},
		{KeyboardRequest{Action: "hold_key", Keys: "a b", DurationMs: 10}, []string{"one combination"}},
		{KeyboardRequest{Action: "press"}, []string{"action", "type, key or hold_key"}},
	} {
		_, err := checkKeyboard(c.r)
		wantBad(t, err, c.parts...)
	}
	if _, err := checkKeyboard(KeyboardRequest{Action: "type", Text: strings.Repeat("日", MaxTypeChars)}); err != nil {
		t.Errorf("type at the limit: %v", err)
	}
	if ks, err := checkKeyboard(KeyboardRequest{Action: "key", Keys: "ctrl+a Delete"}); err != nil || len(ks) != 2 {
		t.Errorf("two combos: %v %v", ks, err)
	}
}

func TestMouseSteps(t *testing.T) {
	for _, c := range []struct {
		r     MouseRequest
		parts []string
	}{
		{MouseRequest{Action: "move", Coordinate: []int{1280, 10}}, []string{"coordinate", "[1280, 10]", "1280x720"}},
		{MouseRequest{Action: "move", Coordinate: []int{-1, 10}}, []string{"off the 1280x720 screen"}},
		{MouseRequest{Action: "move"}, []string{"coordinate", "required"}},
		{MouseRequest{Action: "move", Coordinate: []int{1}}, []string{"[x, y]"}},
		{MouseRequest{Action: "click", Button: "fourth"}, []string{"button"}},
		{MouseRequest{Action: "click", Clicks: 4}, []string{"clicks", "1..3"}},
		{MouseRequest{Action: "click", Modifiers: []string{"hyperctrl"}}, []string{"modifiers[0]", "hyperctrl"}},
		{MouseRequest{Action: "drag", Path: [][]int{{1, 1}}}, []string{"path", "2..1000"}},
		{MouseRequest{Action: "drag", Path: [][]int{{1, 1}, {5000, 1}}}, []string{"path[1]", "off"}},
		{MouseRequest{Action: "scroll", Direction: "sideways"}, []string{"direction"}},
		{MouseRequest{Action: "scroll", Direction: "up", Amount: 101}, []string{"amount", "1..100"}},
		{MouseRequest{Action: "jump"}, []string{"action"}},
		{MouseRequest{Action: "move", Coordinate: []int{1, 1}, Modifiers: []string{"ctrl"}}, []string{"modifiers"}},
	} {
		_, err := mouseSteps(c.r, 1280, 720)
		wantBad(t, err, c.parts...)
	}
	steps, err := mouseSteps(MouseRequest{Action: "click", Coordinate: []int{10, 20}, Clicks: 2, Button: "right", Modifiers: []string{"ctrl+shift"}}, 1280, 720)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, s := range steps {
		kinds = append(kinds, fmt.Sprint(s.typ, ":", s.detail))
	}
	// move, ctrl and shift down, two right clicks, shift and ctrl up
	if got := strings.Join(kinds, " "); got != "6:0 2:0 2:0 4:3 5:3 4:3 5:3 3:0 3:0" {
		t.Errorf("steps %s", got)
	}
	if steps[len(steps)-1].sym != 0xffe3 {
		t.Errorf("the last release is %x, want Control_L", steps[len(steps)-1].sym)
	}
}

func TestCheckShot(t *testing.T) {
	for _, c := range []struct {
		r     ShotRequest
		parts []string
	}{
		{ShotRequest{Format: "gif"}, []string{"format"}},
		{ShotRequest{Quality: 101}, []string{"quality"}},
		{ShotRequest{Width: 2000}, []string{"width", "1280"}},
	} {
		wantBad(t, checkShot(&c.r, 1280), c.parts...)
	}
}

// xvfb starts an Xvfb of its own for the test, on a free display.
func xvfb(t *testing.T) string {
	t.Helper()
	testkit.RequireTools(t, "apt-get install -y xvfb x11-utils xdotool", "Xvfb", "xdpyinfo")
	return testkit.StartXvfb(t, 640, 480)
}

func TestActionsOnXvfb(t *testing.T) {
	display := xvfb(t)
	d := New(Config{Display: display, Width: 640, Height: 480})
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	c := NewClient(srv.URL, "", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := c.Shot(ctx, ShotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(s.Data))
	if err != nil || img.Bounds().Dx() != 640 || s.ScreenWidth != 640 || s.ScreenHeight != 480 || s.Scale != 1 {
		t.Fatalf("png: %v %v %+v", err, img.Bounds(), s.Scale)
	}
	s, err = c.Shot(ctx, ShotRequest{Format: "jpeg", Quality: 50, Width: 320})
	if err != nil {
		t.Fatal(err)
	}
	img, err = jpeg.Decode(bytes.NewReader(s.Data))
	if err != nil || img.Bounds().Dx() != 320 || img.Bounds().Dy() != 240 || s.Scale != 0.5 || s.Format != "jpeg" {
		t.Fatalf("jpeg: %v %v scale %v", err, img.Bounds(), s.Scale)
	}

	res, err := c.Mouse(ctx, MouseRequest{Action: "move", Coordinate: []int{100, 200}})
	if err != nil || fmt.Sprint(res.Cursor) != "[100 200]" || res.ScreenWidth != 640 {
		t.Fatalf("move: %+v %v", res, err)
	}
	if res, err = c.Mouse(ctx, MouseRequest{Action: "click", Coordinate: []int{300, 10}, Clicks: 3, Modifiers: []string{"ctrl"}}); err != nil || fmt.Sprint(res.Cursor) != "[300 10]" {
		t.Fatalf("click: %+v %v", res, err)
	}
	if res, err = c.Mouse(ctx, MouseRequest{Action: "drag", Path: [][]int{{10, 10}, {200, 100}, {50, 60}}}); err != nil || fmt.Sprint(res.Cursor) != "[50 60]" {
		t.Fatalf("drag: %+v %v", res, err)
	}
	if _, err = c.Mouse(ctx, MouseRequest{Action: "scroll", Direction: "down", Amount: 5}); err != nil {
		t.Fatalf("scroll: %v", err)
	}
	if _, err = c.Keyboard(ctx, KeyboardRequest{Action: "key", Keys: "ctrl+a Return A exclam"}); err != nil {
		t.Fatalf("key: %v", err)
	}
	if _, err = c.Keyboard(ctx, KeyboardRequest{Action: "hold_key", Keys: "shift", DurationMs: 50}); err != nil {
		t.Fatalf("hold_key: %v", err)
	}
	if _, err := exec.LookPath("xdotool"); err == nil {
		if _, err = c.Keyboard(ctx, KeyboardRequest{Action: "key", Keys: "ctrl+日"}); err != nil {
			t.Fatalf("key off the keymap: %v", err)
		}
		if _, err = c.Keyboard(ctx, KeyboardRequest{Action: "type", Text: "héllo ✓"}); err != nil {
			t.Fatalf("type: %v", err)
		}
	}
	res, err = c.Cursor(ctx)
	if err != nil || fmt.Sprint(res.Cursor) != "[50 60]" {
		t.Fatalf("cursor: %+v %v", res, err)
	}
	_, err = c.Mouse(ctx, MouseRequest{Action: "click", Coordinate: []int{640, 0}})
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest || !strings.Contains(re.Message, "640x480") {
		t.Fatalf("off the screen: %v", err)
	}
	if _, err := c.Wait(ctx, WaitRequest{DurationMs: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, WaitRequest{DurationMs: 30001}); !errors.As(err, &re) || re.Status != 400 {
		t.Fatalf("long wait: %v", err)
	}
}

func BenchmarkShotPNG(b *testing.B) {
	if _, err := exec.LookPath("Xvfb"); err != nil {
		b.Skip("needs Xvfb")
	}
	display := os.Getenv("BERTH_BENCH_DISPLAY")
	if display == "" {
		b.Skip("set BERTH_BENCH_DISPLAY to a running X display")
	}
	d := New(Config{Display: display})
	defer d.Close()
	for b.Loop() {
		if _, err := d.Screenshot(context.Background(), ShotRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
