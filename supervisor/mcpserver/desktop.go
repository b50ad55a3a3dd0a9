package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
)

// Desktop tool names.
const (
	ToolScreenshot = "computer_screenshot"
	ToolAction     = "computer_action"
)

// Limits of the desktop tools (the computer checks them too).
const (
	MaxTypeChars       = 10000
	MaxWaitSeconds     = 30
	MaxScreenshotWidth = 7680
)

// actions are computer_action's actions, named as computer-use models name
// them.
var actions = []string{
	"screenshot", "cursor_position", "mouse_move", "left_click", "right_click", "middle_click",
	"double_click", "triple_click", "left_click_drag", "left_mouse_down", "left_mouse_up",
	"scroll", "type", "key", "hold_key", "wait",
}

var (
	screenshotDescription = "Take a screenshot of the computer's screen (desktop computers only) and return it as an image. " +
		"width scales the image down to that many pixels wide (the screen's own size when absent), keeping the aspect ratio; " +
		"format is png (default) or jpeg, with quality 1-100 for jpeg. " +
		"The answer says the screen's size and the scale (image width / screen width). " +
		"computer_action takes coordinates in the space of the last screenshot (scaled back to the screen for you), unless given its own scale."

	actionDescription = fmt.Sprintf("Use the computer's screen (desktop computers only) with the mouse and keyboard, with the actions of computer-use models: "+
		"screenshot (returns the image, like computer_screenshot), cursor_position, mouse_move {coordinate}, "+
		"left_click, right_click, middle_click, double_click, triple_click {coordinate optional: where the pointer is when absent; text optional: modifier keys held during the click, such as \"shift\" or \"ctrl+shift\"}, "+
		"left_click_drag {start_coordinate (default: where the pointer is), coordinate}, left_mouse_down and left_mouse_up {coordinate optional}, "+
		"scroll {scroll_direction up|down|left|right, scroll_amount wheel clicks (default 3), coordinate optional, text optional modifiers}, "+
		"type {text: any Unicode, at most %s characters}, key {text: xdotool key names such as \"Return\", \"ctrl+s\", \"alt+Tab\"; several combinations separated by spaces are pressed in turn}, "+
		"hold_key {text: the keys, duration: seconds, at most %d}, wait {duration: seconds, at most %d}. "+
		"coordinate is [x, y] in pixels from the top left corner of the last screenshot taken through these tools: when that screenshot was scaled, "+
		"the coordinates are mapped back to the screen. Pass scale (image width / screen width, 1 for screen pixels) to say which space they are in. "+
		"Each action answers once the screen has applied it, with the pointer's position in the same space; take a screenshot to see the result.",
		thousands(MaxTypeChars), MaxWaitSeconds, MaxWaitSeconds)
)

type (
	screenshotInput struct {
		Width   int    `json:"width,omitempty"`
		Format  string `json:"format,omitempty"`
		Quality int    `json:"quality,omitempty"`
	}
	actionInput struct {
		Action          string   `json:"action"`
		Coordinate      []int    `json:"coordinate,omitempty"`
		StartCoordinate []int    `json:"start_coordinate,omitempty"`
		Text            string   `json:"text,omitempty"`
		ScrollDirection string   `json:"scroll_direction,omitempty"`
		ScrollAmount    int      `json:"scroll_amount,omitempty"`
		Duration        *float64 `json:"duration,omitempty"`
		Scale           *float64 `json:"scale,omitempty"`
		// Screenshot options, for action screenshot.
		Width   int    `json:"width,omitempty"`
		Format  string `json:"format,omitempty"`
		Quality int    `json:"quality,omitempty"`
	}
	// actionOutput is computer_action's structured answer.
	actionOutput struct {
		Action       string  `json:"action"`
		Cursor       []int   `json:"cursor,omitempty"` // in the coordinates' space
		ScreenCursor []int   `json:"screenCursor,omitempty"`
		ScreenWidth  int     `json:"screenWidth,omitempty"`
		ScreenHeight int     `json:"screenHeight,omitempty"`
		Scale        float64 `json:"scale"`
	}
)

// desktopScale remembers the scale of the agent's last screenshot taken
// through this server.
type desktopScale struct {
	mu    sync.Mutex
	scale float64
}

func (d *desktopScale) get() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.scale == 0 {
		return 1
	}
	return d.scale
}

func (d *desktopScale) set(s float64) {
	d.mu.Lock()
	d.scale = s
	d.mu.Unlock()
}

func (s *Server) addDesktopTools() {
	coord := func(what string) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "integer"}, MinItems: ptr(2), MaxItems: ptr(2), Description: what}
	}
	shotProps := func() map[string]*jsonschema.Schema {
		return map[string]*jsonschema.Schema{
			"width":   {Type: "integer", Description: "Scale the image to this width in pixels (at most the screen's width); absent: the screen's size."},
			"format":  {Type: "string", Enum: []any{"png", "jpeg"}, Description: "png (default) or jpeg."},
			"quality": {Type: "integer", Description: "JPEG quality 1-100 (default 80)."},
		}
	}
	addContentTool(s, &mcp.Tool{
		Name: ToolScreenshot, Title: "Take a screenshot", Description: screenshotDescription,
		InputSchema: objectSchema(shotProps()),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, in screenshotInput) ([]mcp.Content, any, error) {
		return s.screenshot(ctx, api.ScreenshotRequest{Width: in.Width, Format: in.Format, Quality: in.Quality})
	})
	enum := make([]any, len(actions))
	for i, a := range actions {
		enum[i] = a
	}
	props := shotProps()
	for k, v := range map[string]*jsonschema.Schema{
		"action":           {Type: "string", Enum: enum, Description: "What to do."},
		"coordinate":       coord("[x, y] in the last screenshot's pixels (see scale)."),
		"start_coordinate": coord("left_click_drag: where the drag starts, [x, y]."),
		"text":             {Type: "string", Description: "type: the text; key and hold_key: the keys (\"ctrl+s\", \"Return\"); clicks and scroll: modifier keys held (\"shift\", \"ctrl+alt\")."},
		"scroll_direction": {Type: "string", Enum: []any{"up", "down", "left", "right"}, Description: "scroll: the direction."},
		"scroll_amount":    {Type: "integer", Description: "scroll: wheel clicks, 1 to 100 (default 3)."},
		"duration":         {Type: "number", Description: fmt.Sprintf("hold_key and wait: seconds, at most %d.", MaxWaitSeconds)},
		"scale":            {Type: "number", Description: "The space of the coordinates: image width / screen width of the screenshot they were read from (1: screen pixels). Default: the scale of the last screenshot taken through these tools."},
	} {
		props[k] = v
	}
	addContentTool(s, &mcp.Tool{
		Name: ToolAction, Title: "Use the mouse and keyboard", Description: actionDescription,
		InputSchema: objectSchema(props, "action"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, s.action)
}

// addContentTool registers a tool whose answer is content of its own
// (images); see addTool.
func addContentTool[In any](s *Server, t *mcp.Tool, run func(context.Context, In) ([]mcp.Content, any, error)) {
	name := t.Name
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		if s.draining.Load() {
			return nil, nil, fmt.Errorf("%s was not run: the MCP server is shutting down; call it again once the server is back", name)
		}
		key := s.callKey(req)
		if key != "" {
			ctx = api.WithIdempotencyKey(ctx, key)
		}
		start := time.Now()
		content, out, err := run(ctx, in)
		if err != nil {
			s.log.Info("tool call failed", "tool", name, "key", key, "duration", time.Since(start), "err", err)
			return nil, nil, toolError(name, err)
		}
		s.log.Debug("tool call", "tool", name, "key", key, "duration", time.Since(start))
		return &mcp.CallToolResult{Content: content}, out, nil
	})
}

func (s *Server) screenshot(ctx context.Context, r api.ScreenshotRequest) ([]mcp.Content, any, error) {
	if r.Width < 0 || r.Width > MaxScreenshotWidth {
		return nil, nil, failf("width: %d is outside 16..the screen's width", r.Width)
	}
	shot, err := s.c.DesktopScreenshot(ctx, s.agent, r)
	if err != nil {
		return nil, nil, err
	}
	scale := shot.Scale
	if scale <= 0 {
		scale = 1
	}
	s.scale.set(scale)
	text := fmt.Sprintf("Screenshot %dx%d (%s) of the %dx%d screen, scale %g.", shot.Width, shot.Height, shot.Format, shot.ScreenWidth, shot.ScreenHeight, scale)
	if scale != 1 {
		text += " computer_action maps coordinates in this image back to the screen."
	}
	return []mcp.Content{
		&mcp.ImageContent{Data: shot.Data, MIMEType: "image/" + shot.Format},
		&mcp.TextContent{Text: text},
	}, nil, nil
}

// toScreen maps a coordinate in the space of scale to the screen.
func toScreen(field string, c []int, scale float64) ([]int, error) {
	if c == nil {
		return nil, nil
	}
	if len(c) != 2 {
		return nil, failf("%s: want [x, y], got %d numbers", field, len(c))
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
	var out []string
	for _, f := range strings.Fields(strings.ReplaceAll(text, "+", " ")) {
		out = append(out, f)
	}
	return out
}

// seconds converts an action's duration to milliseconds.
func seconds(action string, d *float64) (int, error) {
	if d == nil {
		return 0, failf("duration: required for %s (seconds, at most %d)", action, MaxWaitSeconds)
	}
	if *d < 0 || *d > MaxWaitSeconds || math.IsNaN(*d) {
		return 0, failf("duration: %g is outside 0..%d seconds", *d, MaxWaitSeconds)
	}
	return int(math.Round(*d * 1000)), nil
}

func (s *Server) action(ctx context.Context, in actionInput) ([]mcp.Content, any, error) {
	if in.Action == "screenshot" {
		return s.screenshot(ctx, api.ScreenshotRequest{Width: in.Width, Format: in.Format, Quality: in.Quality})
	}
	scale := s.scale.get()
	if in.Scale != nil {
		if *in.Scale <= 0 || *in.Scale > 1 || math.IsNaN(*in.Scale) {
			return nil, nil, failf("scale: %g must be above 0 and at most 1 (image width / screen width)", *in.Scale)
		}
		scale = *in.Scale
	}
	c, err := toScreen("coordinate", in.Coordinate, scale)
	if err != nil {
		return nil, nil, err
	}
	start, err := toScreen("start_coordinate", in.StartCoordinate, scale)
	if err != nil {
		return nil, nil, err
	}
	if start != nil && in.Action != "left_click_drag" {
		return nil, nil, failf("start_coordinate: for left_click_drag only")
	}
	if in.Text != "" && n(in.Text) > MaxTypeChars {
		return nil, nil, failf("text: %d characters, at most %d", n(in.Text), MaxTypeChars)
	}
	if in.ScrollDirection != "" && in.Action != "scroll" {
		return nil, nil, failf("scroll_direction: for scroll only")
	}
	click := func(button string, clicks int) (*api.DesktopResult, error) {
		return s.c.DesktopMouse(ctx, s.agent, api.MouseRequest{Action: "click", Coordinate: c, Button: button, Clicks: clicks, Modifiers: modifiers(in.Text)})
	}
	var res *api.DesktopResult
	switch in.Action {
	case "cursor_position":
		res, err = s.c.DesktopCursor(ctx, s.agent)
	case "mouse_move":
		if c == nil {
			return nil, nil, failf("coordinate: required for mouse_move")
		}
		res, err = s.c.DesktopMouse(ctx, s.agent, api.MouseRequest{Action: "move", Coordinate: c})
	case "left_click":
		res, err = click("left", 1)
	case "right_click":
		res, err = click("right", 1)
	case "middle_click":
		res, err = click("middle", 1)
	case "double_click":
		res, err = click("left", 2)
	case "triple_click":
		res, err = click("left", 3)
	case "left_mouse_down", "left_mouse_up":
		res, err = s.c.DesktopMouse(ctx, s.agent, api.MouseRequest{Action: strings.TrimPrefix(in.Action, "left_mouse_"), Coordinate: c})
	case "left_click_drag":
		if c == nil {
			return nil, nil, failf("coordinate: required for left_click_drag (where the drag ends)")
		}
		if start == nil {
			cur, err := s.c.DesktopCursor(ctx, s.agent)
			if err != nil {
				return nil, nil, err
			}
			start = cur.Cursor
		}
		res, err = s.c.DesktopMouse(ctx, s.agent, api.MouseRequest{Action: "drag", Path: [][]int{start, c}, Modifiers: modifiers(in.Text)})
	case "scroll":
		if in.ScrollDirection == "" {
			return nil, nil, failf("scroll_direction: required for scroll (up, down, left or right)")
		}
		res, err = s.c.DesktopMouse(ctx, s.agent, api.MouseRequest{Action: "scroll", Coordinate: c, Direction: in.ScrollDirection, Amount: in.ScrollAmount, Modifiers: modifiers(in.Text)})
	case "type":
		if in.Text == "" {
			return nil, nil, failf("text: required for type")
		}
		res, err = s.c.DesktopKeyboard(ctx, s.agent, api.KeyboardRequest{Action: "type", Text: in.Text})
	case "key":
		if strings.TrimSpace(in.Text) == "" {
			return nil, nil, failf("text: required for key (xdotool key names such as \"Return\" or \"ctrl+s\")")
		}
		res, err = s.c.DesktopKeyboard(ctx, s.agent, api.KeyboardRequest{Action: "key", Keys: in.Text})
	case "hold_key":
		ms, derr := seconds(in.Action, in.Duration)
		if derr != nil {
			return nil, nil, derr
		}
		res, err = s.c.DesktopKeyboard(ctx, s.agent, api.KeyboardRequest{Action: "hold_key", Keys: in.Text, DurationMs: max(ms, 1)})
	case "wait":
		ms, derr := seconds(in.Action, in.Duration)
		if derr != nil {
			return nil, nil, derr
		}
		res, err = s.c.DesktopWait(ctx, s.agent, api.WaitRequest{DurationMs: ms})
	case "":
		return nil, nil, failf("action: required, one of %s", strings.Join(actions, ", "))
	default:
		return nil, nil, failf("action: %q is not one of %s", in.Action, strings.Join(actions, ", "))
	}
	if err != nil {
		return nil, nil, err
	}
	if res == nil {
		return nil, nil, failf("the supervisor answered without a result")
	}
	out := actionOutput{Action: in.Action, Cursor: fromScreen(res.Cursor, scale), ScreenCursor: res.Cursor,
		ScreenWidth: res.ScreenWidth, ScreenHeight: res.ScreenHeight, Scale: scale}
	text := fmt.Sprintf("%s done. Pointer at %v", in.Action, out.Cursor)
	if scale != 1 {
		text += fmt.Sprintf(" in the screenshot's space (scale %g; %v on the %dx%d screen)", scale, res.Cursor, res.ScreenWidth, res.ScreenHeight)
	}
	text += "."
	raw, _ := json.Marshal(out)
	var structured map[string]any
	json.Unmarshal(raw, &structured)
	return []mcp.Content{&mcp.TextContent{Text: text}}, structured, nil
}

func n(s string) int { return len([]rune(s)) }
