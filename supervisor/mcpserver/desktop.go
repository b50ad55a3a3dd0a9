package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
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

// Limits of the desktop tools (the supervisor and the computer check them).
const (
	MaxTypeChars       = api.MaxTypeChars
	MaxWaitSeconds     = api.MaxDesktopWaitSecs
	MaxScreenshotWidth = 7680
)

// actions are computer_action's actions, named as computer-use models name
// them.
var actions = api.DesktopActions

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
	// actionInput is computer_action's input: POST .../desktop/action's
	// body, whose answer (api.ActionResult) is its structured answer.
	actionInput = api.ActionRequest
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

// holder is the desktop holder this server names in its desktop calls
// (api.HeaderDesktopHolder): one per server process, so that the agents
// of two MCP servers sharing a computer take a desktop seat each.
func (s *Server) holder() string { return "mcp-" + s.id }

func (s *Server) screenshot(ctx context.Context, r api.ScreenshotRequest) ([]mcp.Content, any, error) {
	ctx = api.WithDesktopHolder(ctx, s.holder())
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

func (s *Server) action(ctx context.Context, in actionInput) ([]mcp.Content, any, error) {
	if in.Action == "screenshot" {
		return s.screenshot(ctx, api.ScreenshotRequest{Width: in.Width, Format: in.Format, Quality: in.Quality})
	}
	if in.Scale == nil {
		scale := s.scale.get()
		in.Scale = &scale
	}
	res, err := s.c.DesktopAction(api.WithDesktopHolder(ctx, s.holder()), s.agent, in)
	if err != nil {
		return nil, nil, err
	}
	if res == nil {
		return nil, nil, failf("the supervisor answered without a result")
	}
	text := fmt.Sprintf("%s done. Pointer at %v", in.Action, res.Cursor)
	if res.Scale != 1 {
		text += fmt.Sprintf(" in the screenshot's space (scale %g; %v on the %dx%d screen)", res.Scale, res.ScreenCursor, res.ScreenWidth, res.ScreenHeight)
	}
	text += "."
	raw, _ := json.Marshal(res)
	var structured map[string]any
	json.Unmarshal(raw, &structured)
	return []mcp.Content{&mcp.TextContent{Text: text}}, structured, nil
}
