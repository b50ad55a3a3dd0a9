package supervisor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd/desktop"
)

// fakeDesktop records the calls a desktop action makes.
type fakeDesktop struct{ calls []string }

func (f *fakeDesktop) answer(call string) (desktop.ActionResult, error) {
	f.calls = append(f.calls, call)
	return desktop.ActionResult{Cursor: []int{640, 360}, ScreenWidth: 1280, ScreenHeight: 720}, nil
}

func (f *fakeDesktop) Cursor(context.Context) (desktop.ActionResult, error) {
	return f.answer("cursor")
}
func (f *fakeDesktop) Mouse(_ context.Context, r desktop.MouseRequest) (desktop.ActionResult, error) {
	return f.answer(fmt.Sprintf("mouse %+v", r))
}
func (f *fakeDesktop) Keyboard(_ context.Context, r desktop.KeyboardRequest) (desktop.ActionResult, error) {
	return f.answer(fmt.Sprintf("keyboard %+v", r))
}
func (f *fakeDesktop) Wait(_ context.Context, r desktop.WaitRequest) (desktop.ActionResult, error) {
	return f.answer(fmt.Sprintf("wait %+v", r))
}

func TestDesktopCoordinates(t *testing.T) {
	c, err := toScreen("coordinate", []int{512, 288}, 0.8)
	if err != nil || fmt.Sprint(c) != "[640 360]" {
		t.Fatalf("toScreen: %v %v", c, err)
	}
	if c := fromScreen([]int{640, 360}, 0.8); fmt.Sprint(c) != "[512 288]" {
		t.Fatalf("fromScreen: %v", c)
	}
	if _, err := toScreen("coordinate", []int{1}, 1); err == nil || !strings.Contains(err.Error(), "[x, y]") {
		t.Fatalf("one number: %v", err)
	}
	if m := modifiers("ctrl+shift"); fmt.Sprint(m) != "[ctrl shift]" {
		t.Fatalf("modifiers: %v", m)
	}
}

func TestDesktopActionFieldNames(t *testing.T) {
	for in, want := range map[string]string{
		`keys: unknown key name "Enterr" in "Enterr"`: `text: unknown key name "Enterr" in "Enterr"`,
		"amount: 101 is outside 1..100":               "scroll_amount: 101 is outside 1..100",
		"coordinate: [5000, 10] is off the screen":    "coordinate: [5000, 10] is off the screen",
		"no field here": "no field here",
	} {
		if got := actionField(in); got != want {
			t.Errorf("actionField(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDesktopActionArguments(t *testing.T) {
	d := 31.0
	for _, c := range []struct {
		in   api.ActionRequest
		want string
	}{
		{api.ActionRequest{Action: "fly"}, `action: "fly" is not one of screenshot, cursor_position`},
		{api.ActionRequest{}, "action: required"},
		{api.ActionRequest{Action: "mouse_move"}, "coordinate: required"},
		{api.ActionRequest{Action: "left_click", Coordinate: []int{1}}, "coordinate: want [x, y]"},
		{api.ActionRequest{Action: "wait", Duration: &d}, "outside 0..30"},
		{api.ActionRequest{Action: "wait"}, "duration: required"},
		{api.ActionRequest{Action: "type"}, "text: required"},
		{api.ActionRequest{Action: "type", Text: strings.Repeat("x", api.MaxTypeChars+1)}, "10001 characters, at most 10000"},
		{api.ActionRequest{Action: "scroll"}, "scroll_direction: required"},
		{api.ActionRequest{Action: "left_click", StartCoordinate: []int{1, 1}}, "left_click_drag only"},
		{api.ActionRequest{Action: "left_click", Scale: new(2.0)}, "scale"},
		{api.ActionRequest{Action: "left_click", Width: 640}, "for screenshot only"},
		{api.ActionRequest{Action: "key", Duration: new(1.0), Text: "a"}, "duration: for wait and hold_key only"},
	} {
		_, _, err := planAction(c.in)
		e := AsError(err)
		if err == nil || e.Status != 400 || !strings.Contains(e.Message, c.want) {
			t.Errorf("%+v: %v, want a 400 with %q", c.in, err, c.want)
		}
	}
}

func TestDesktopActionCalls(t *testing.T) {
	half := 0.5
	for _, c := range []struct {
		in   api.ActionRequest
		want string
	}{
		{api.ActionRequest{Action: "left_click", Coordinate: []int{100, 50}, Scale: &half},
			"mouse {Action:click Coordinate:[200 100] Button:left Clicks:1 Modifiers:[] Path:[] Direction: Amount:0}"},
		{api.ActionRequest{Action: "triple_click", Text: "shift"},
			"mouse {Action:click Coordinate:[] Button:left Clicks:3 Modifiers:[shift] Path:[] Direction: Amount:0}"},
		{api.ActionRequest{Action: "left_click_drag", Coordinate: []int{10, 20}},
			"cursor; mouse {Action:drag Coordinate:[] Button: Clicks:0 Modifiers:[] Path:[[640 360] [10 20]] Direction: Amount:0}"},
		{api.ActionRequest{Action: "scroll", ScrollDirection: "down", ScrollAmount: 5, Coordinate: []int{1, 2}},
			"mouse {Action:scroll Coordinate:[1 2] Button: Clicks:0 Modifiers:[] Path:[] Direction:down Amount:5}"},
		{api.ActionRequest{Action: "type", Text: "héllo"}, "keyboard {Action:type Text:héllo Keys: DurationMs:0}"},
		{api.ActionRequest{Action: "key", Text: "ctrl+s Return"}, "keyboard {Action:key Text: Keys:ctrl+s Return DurationMs:0}"},
		{api.ActionRequest{Action: "hold_key", Text: "shift", Duration: new(0.25)}, "keyboard {Action:hold_key Text: Keys:shift DurationMs:250}"},
		{api.ActionRequest{Action: "wait", Duration: new(1.5)}, "wait {DurationMs:1500}"},
		{api.ActionRequest{Action: "cursor_position"}, "cursor"},
	} {
		run, scale, err := planAction(c.in)
		if err != nil {
			t.Fatalf("%+v: %v", c.in, err)
		}
		var f fakeDesktop
		a, err := run(context.Background(), &f)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(f.calls, "; "); got != c.want {
			t.Errorf("%s: calls %q, want %q", c.in.Action, got, c.want)
		}
		res := actionResult(c.in.Action, a, scale)
		if scale == 0.5 && (fmt.Sprint(res.Cursor) != "[320 180]" || *res.X != 320 || *res.Y != 180 || fmt.Sprint(res.ScreenCursor) != "[640 360]") {
			t.Errorf("scaled result: %+v", res)
		}
	}
}
