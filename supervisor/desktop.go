package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// CodeNotDesktop answers a desktop tool on a computer without a screen (409).
const CodeNotDesktop = api.CodeNotDesktop

// desktopClient returns a client of the desktop of the agent's running
// computer, once the caller holds one of its desktop seats (see
// desktopSeat). Like every tool call it counts as the session's activity.
func (s *Service) desktopClient(ctx context.Context, agent string) (*desktop.Client, store.Session, error) {
	x, err := s.running(ctx, agent)
	if err != nil {
		return nil, x, err
	}
	if x.Image != providers.ImageDesktop {
		return nil, x, errorf(http.StatusConflict, CodeNotDesktop,
			"session %s runs the %q image, which has no screen; connect with \"image\": \"desktop\" for the desktop tools", x.ID, x.Image)
	}
	if err := s.desktopSeat(ctx, x); err != nil {
		return nil, x, err
	}
	hc, h, err := s.ComputerTransport(ctx, x)
	if err != nil {
		return nil, x, err
	}
	return desktop.NewClient(x.Endpoint, s.cfg.Tokens.Derive(token.Computer, x.ComputerID), hc, h), x, nil
}

// desktopError maps computerd's answer to a desktop action.
func desktopError(x store.Session, err error) error {
	var re *desktop.RemoteError
	if !errors.As(err, &re) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return errorf(http.StatusBadGateway, CodeProvider, "the computer's desktop did not answer: %v", err)
	}
	switch re.Status {
	case http.StatusBadRequest:
		return badRequest("%s", re.Message)
	case http.StatusNotFound:
		return errorf(http.StatusConflict, CodeNotDesktop, "session %s has no desktop tools: its computer serves no screen", x.ID)
	}
	return errorf(http.StatusBadGateway, CodeProvider, "the computer's desktop failed: %s", re.Message)
}

// DesktopScreenshot takes a screenshot of the agent's desktop.
func (s *Service) DesktopScreenshot(ctx context.Context, agent string, r api.ScreenshotRequest) (api.Screenshot, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.Screenshot{}, err
	}
	shot, err := c.Shot(ctx, desktop.ShotRequest{Format: r.Format, Quality: r.Quality, Width: r.Width})
	if err != nil {
		return api.Screenshot{}, desktopError(x, err)
	}
	return api.Screenshot{Format: shot.Format, Data: shot.Data, Width: shot.Width, Height: shot.Height,
		ScreenWidth: shot.ScreenWidth, ScreenHeight: shot.ScreenHeight, Scale: shot.Scale}, nil
}

func result(a desktop.ActionResult) api.DesktopResult {
	return api.DesktopResult{Cursor: a.Cursor, ScreenWidth: a.ScreenWidth, ScreenHeight: a.ScreenHeight}
}

// DesktopCursor returns the pointer's position on the agent's desktop.
func (s *Service) DesktopCursor(ctx context.Context, agent string) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Cursor(ctx)
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// DesktopMouse moves, clicks, drags or scrolls on the agent's desktop.
func (s *Service) DesktopMouse(ctx context.Context, agent string, r api.MouseRequest) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Mouse(ctx, desktop.MouseRequest{Action: r.Action, Coordinate: r.Coordinate, Button: r.Button, Clicks: r.Clicks,
		Modifiers: r.Modifiers, Path: r.Path, Direction: r.Direction, Amount: r.Amount})
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// DesktopKeyboard types text or presses keys on the agent's desktop.
func (s *Service) DesktopKeyboard(ctx context.Context, agent string, r api.KeyboardRequest) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Keyboard(ctx, desktop.KeyboardRequest{Action: r.Action, Text: r.Text, Keys: r.Keys, DurationMs: r.DurationMs})
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// DesktopWait waits on the agent's desktop.
func (s *Service) DesktopWait(ctx context.Context, agent string, r api.WaitRequest) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Wait(ctx, desktop.WaitRequest{DurationMs: r.DurationMs})
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// desktopAPI is what a desktop action calls on the computer's computerd.
type desktopAPI interface {
	Cursor(ctx context.Context) (desktop.ActionResult, error)
	Mouse(ctx context.Context, r desktop.MouseRequest) (desktop.ActionResult, error)
	Keyboard(ctx context.Context, r desktop.KeyboardRequest) (desktop.ActionResult, error)
	Wait(ctx context.Context, r desktop.WaitRequest) (desktop.ActionResult, error)
}

// DesktopAction runs one action of the computer-use vocabulary on the
// agent's desktop (see api.ActionRequest). The REST route and the MCP tool
// computer_action both come here.
func (s *Service) DesktopAction(ctx context.Context, agent string, r api.ActionRequest) (api.ActionResult, error) {
	if r.Action == "screenshot" {
		if r.Coordinate != nil || r.StartCoordinate != nil || r.Text != "" {
			return api.ActionResult{}, badRequest("screenshot takes width, format and quality only")
		}
		shot, err := s.DesktopScreenshot(ctx, agent, api.ScreenshotRequest{Format: r.Format, Quality: r.Quality, Width: r.Width})
		if err != nil {
			return api.ActionResult{}, err
		}
		return api.ActionResult{Action: r.Action, ScreenWidth: shot.ScreenWidth, ScreenHeight: shot.ScreenHeight, Scale: shot.Scale,
			Format: shot.Format, Image: shot.Data, Width: shot.Width, Height: shot.Height}, nil
	}
	run, scale, err := planAction(r)
	if err != nil {
		return api.ActionResult{}, err
	}
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.ActionResult{}, err
	}
	a, err := run(ctx, c)
	if err != nil {
		err = desktopError(x, err)
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusBadRequest {
			e.Message = actionField(e.Message)
			if scale != 1 && strings.Contains(e.Message, "off the") {
				e.Message += fmt.Sprintf("; the coordinates were mapped to the screen from scale %g", scale)
			}
		}
		return api.ActionResult{}, err
	}
	return actionResult(r.Action, a, scale), nil
}

// actionFields are computerd's names of an action's fields, by the names
// the action route gives them.
var actionFields = map[string]string{
	"keys": "text", "modifiers": "text", "durationMs": "duration",
	"direction": "scroll_direction", "amount": "scroll_amount", "path": "coordinate",
}

// actionField renames the field that computerd's message about a bad
// argument starts with to the action route's name for it.
func actionField(msg string) string {
	field, rest, ok := strings.Cut(msg, ": ")
	if to, known := actionFields[field]; ok && known {
		return to + ": " + rest
	}
	return msg
}

// actionResult answers an action's result in the space of scale.
func actionResult(action string, a desktop.ActionResult, scale float64) api.ActionResult {
	out := api.ActionResult{Action: action, Cursor: fromScreen(a.Cursor, scale), ScreenCursor: a.Cursor,
		ScreenWidth: a.ScreenWidth, ScreenHeight: a.ScreenHeight, Scale: scale}
	if len(out.Cursor) == 2 {
		out.X, out.Y = &out.Cursor[0], &out.Cursor[1]
	}
	return out
}

// planAction checks an action's arguments and turns it into the calls to
// computerd that do it, with the scale its coordinates are read in.
func planAction(r api.ActionRequest) (func(context.Context, desktopAPI) (desktop.ActionResult, error), float64, error) {
	scale := 1.0
	if r.Scale != nil {
		if *r.Scale <= 0 || *r.Scale > 1 || math.IsNaN(*r.Scale) {
			return nil, 0, badRequest("scale: %g must be above 0 and at most 1 (image width / screen width)", *r.Scale)
		}
		scale = *r.Scale
	}
	c, err := toScreen("coordinate", r.Coordinate, scale)
	if err != nil {
		return nil, 0, err
	}
	start, err := toScreen("start_coordinate", r.StartCoordinate, scale)
	if err != nil {
		return nil, 0, err
	}
	if start != nil && r.Action != "left_click_drag" {
		return nil, 0, badRequest("start_coordinate: for left_click_drag only")
	}
	if n := utf8.RuneCountInString(r.Text); n > api.MaxTypeChars {
		return nil, 0, badRequest("text: %d characters, at most %d", n, api.MaxTypeChars)
	}
	if r.ScrollDirection != "" && r.Action != "scroll" {
		return nil, 0, badRequest("scroll_direction: for scroll only")
	}
	if r.Width != 0 || r.Format != "" || r.Quality != 0 {
		return nil, 0, badRequest("width, format and quality: for screenshot only")
	}
	mouse := func(m desktop.MouseRequest) func(context.Context, desktopAPI) (desktop.ActionResult, error) {
		return func(ctx context.Context, d desktopAPI) (desktop.ActionResult, error) { return d.Mouse(ctx, m) }
	}
	keys := func(k desktop.KeyboardRequest) func(context.Context, desktopAPI) (desktop.ActionResult, error) {
		return func(ctx context.Context, d desktopAPI) (desktop.ActionResult, error) { return d.Keyboard(ctx, k) }
	}
	click := func(button string, clicks int) func(context.Context, desktopAPI) (desktop.ActionResult, error) {
		return mouse(desktop.MouseRequest{Action: desktop.MouseClick, Coordinate: c, Button: button, Clicks: clicks, Modifiers: modifiers(r.Text)})
	}
	var run func(context.Context, desktopAPI) (desktop.ActionResult, error)
	switch r.Action {
	case "cursor_position":
		run = func(ctx context.Context, d desktopAPI) (desktop.ActionResult, error) { return d.Cursor(ctx) }
	case "mouse_move":
		if c == nil {
			return nil, 0, badRequest("coordinate: required for mouse_move")
		}
		run = mouse(desktop.MouseRequest{Action: desktop.MouseMove, Coordinate: c})
	case "left_click":
		run = click("left", 1)
	case "right_click":
		run = click("right", 1)
	case "middle_click":
		run = click("middle", 1)
	case "double_click":
		run = click("left", 2)
	case "triple_click":
		run = click("left", 3)
	case "left_mouse_down":
		run = mouse(desktop.MouseRequest{Action: desktop.MouseDown, Coordinate: c})
	case "left_mouse_up":
		run = mouse(desktop.MouseRequest{Action: desktop.MouseUp, Coordinate: c})
	case "left_click_drag":
		if c == nil {
			return nil, 0, badRequest("coordinate: required for left_click_drag (where the drag ends)")
		}
		mods := modifiers(r.Text)
		run = func(ctx context.Context, d desktopAPI) (desktop.ActionResult, error) {
			from := start
			if from == nil {
				cur, err := d.Cursor(ctx)
				if err != nil {
					return cur, err
				}
				from = cur.Cursor
			}
			return d.Mouse(ctx, desktop.MouseRequest{Action: desktop.MouseDrag, Path: [][]int{from, c}, Modifiers: mods})
		}
	case "scroll":
		if r.ScrollDirection == "" {
			return nil, 0, badRequest("scroll_direction: required for scroll (up, down, left or right)")
		}
		run = mouse(desktop.MouseRequest{Action: desktop.MouseScroll, Coordinate: c, Direction: r.ScrollDirection, Amount: r.ScrollAmount, Modifiers: modifiers(r.Text)})
	case "type":
		if r.Text == "" {
			return nil, 0, badRequest("text: required for type")
		}
		run = keys(desktop.KeyboardRequest{Action: desktop.KeyType, Text: r.Text})
	case "key", "hold_key":
		if strings.TrimSpace(r.Text) == "" {
			return nil, 0, badRequest("text: required for %s (X key names such as \"Return\" or \"ctrl+s\")", r.Action)
		}
		k := desktop.KeyboardRequest{Action: desktop.KeyPress, Keys: r.Text}
		if r.Action == "hold_key" {
			ms, err := seconds(r.Action, r.Duration)
			if err != nil {
				return nil, 0, err
			}
			k = desktop.KeyboardRequest{Action: desktop.KeyHold, Keys: r.Text, DurationMs: max(ms, 1)}
		}
		run = keys(k)
	case "wait":
		ms, err := seconds(r.Action, r.Duration)
		if err != nil {
			return nil, 0, err
		}
		run = func(ctx context.Context, d desktopAPI) (desktop.ActionResult, error) {
			return d.Wait(ctx, desktop.WaitRequest{DurationMs: ms})
		}
	case "":
		return nil, 0, badRequest("action: required, one of %s", strings.Join(api.DesktopActions, ", "))
	default:
		return nil, 0, badRequest("action: %q is not one of %s", r.Action, strings.Join(api.DesktopActions, ", "))
	}
	if r.Duration != nil && r.Action != "wait" && r.Action != "hold_key" {
		return nil, 0, badRequest("duration: for wait and hold_key only")
	}
	return run, scale, nil
}

// toScreen maps a coordinate in the space of scale to the screen.
func toScreen(field string, c []int, scale float64) ([]int, error) {
	if c == nil {
		return nil, nil
	}
	if len(c) != 2 {
		return nil, badRequest("%s: want [x, y], got %d numbers", field, len(c))
	}
	if scale == 1 {
		return c, nil
	}
	return []int{int(math.Floor(float64(c[0]) / scale)), int(math.Floor(float64(c[1]) / scale))}, nil
}

// fromScreen maps a screen position to the space of scale.
func fromScreen(c []int, scale float64) []int {
	if len(c) != 2 || scale == 1 {
		return c
	}
	return []int{int(math.Round(float64(c[0]) * scale)), int(math.Round(float64(c[1]) * scale))}
}

// modifiers splits a click's text into modifier keys.
func modifiers(text string) []string {
	return strings.Fields(strings.ReplaceAll(text, "+", " "))
}

// seconds converts an action's duration to milliseconds.
func seconds(action string, d *float64) (int, error) {
	if d == nil {
		return 0, badRequest("duration: required for %s (seconds, at most %d)", action, api.MaxDesktopWaitSecs)
	}
	if *d < 0 || *d > api.MaxDesktopWaitSecs || math.IsNaN(*d) {
		return 0, badRequest("duration: %g is outside 0..%d seconds", *d, api.MaxDesktopWaitSecs)
	}
	return int(math.Round(*d * 1000)), nil
}
