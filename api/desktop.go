package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Desktop tools: the screen of a desktop computer (image "desktop"). A
// computer without a screen answers 409 not_desktop. Coordinates are
// screen pixels, [x, y] from the top left corner.

// CodeNotDesktop answers a desktop tool on a computer without a screen.
const CodeNotDesktop = "not_desktop"

// Desktop seats. A connection's desktopUsers says how many holders may use
// the desktop tools of its computer at once. A holder is whoever calls:
// the HeaderDesktopHolder of the request (the MCP server sends one random
// id per process), or, without it, the caller's API key (or the operator
// token). A holder's seat lasts from its desktop call until
// DesktopSeatSeconds after its last one, or until the session ends; a
// different holder past the limit is answered 409 CodeDesktopBusy, saying
// how many seats there are and when the first frees. Viewers of live view
// hold seats of their own and are not counted here.
const (
	// CodeDesktopBusy answers a desktop tool while other holders hold
	// every desktop seat of the computer (409).
	CodeDesktopBusy = "desktop_busy"
	// HeaderDesktopHolder names the holder of a desktop call: an opaque
	// id of 1 to MaxDesktopHolderChars printable ASCII characters.
	HeaderDesktopHolder   = "Berth-Desktop-Holder"
	MaxDesktopHolderChars = 64
	// DesktopSeatSeconds is how long a seat lasts after its holder's last
	// desktop call.
	DesktopSeatSeconds = 60
	// DefaultDesktopUsers and MaxDesktopUsers bound a connection's
	// desktopUsers (1..MaxDesktopUsers).
	DefaultDesktopUsers = 1
	MaxDesktopUsers     = 10
)

type holderCtx struct{}

// WithDesktopHolder returns a context under which the client's calls name
// holder in HeaderDesktopHolder.
func WithDesktopHolder(ctx context.Context, holder string) context.Context {
	return context.WithValue(ctx, holderCtx{}, holder)
}

// Headers of a desktop screenshot's answer, whose body is the image.
const (
	HeaderScreenWidth  = "Berth-Screen-Width"
	HeaderScreenHeight = "Berth-Screen-Height"
	HeaderImageWidth   = "Berth-Image-Width"
	HeaderImageHeight  = "Berth-Image-Height"
	HeaderScale        = "Berth-Scale"
)

// ScreenshotRequest asks for a screenshot: the JSON body of POST
// /v1/agents/{agent}/computer/desktop/screenshot, or the query of GET
// (?format=&quality=&width=).
type ScreenshotRequest struct {
	Format  string `json:"format,omitempty"`  // "png" (default) or "jpeg"
	Quality int    `json:"quality,omitempty"` // JPEG quality 1..100 (default 80)
	Width   int    `json:"width,omitempty"`   // scale to this width; 0 keeps the screen's
}

// Screenshot is a screenshot: the image and how it maps to the screen.
type Screenshot struct {
	Format                    string  // "png" or "jpeg"
	Data                      []byte  // the image
	Width, Height             int     // the image's size
	ScreenWidth, ScreenHeight int     // the screen's size
	Scale                     float64 // Width / ScreenWidth
}

// Limits of the desktop actions (the computer checks them too).
const (
	MaxTypeChars       = 10000 // characters of one type action
	MaxDesktopWaitSecs = 30    // seconds of a wait or hold_key
)

// DesktopActions are the actions of POST .../desktop/action, named as
// computer-use models name them.
var DesktopActions = []string{
	"screenshot", "cursor_position", "mouse_move", "left_click", "right_click", "middle_click",
	"double_click", "triple_click", "left_click_drag", "left_mouse_down", "left_mouse_up",
	"scroll", "type", "key", "hold_key", "wait",
}

// ActionRequest is the body of POST /v1/agents/{agent}/computer/desktop/action:
// one action of the computer-use vocabulary (DesktopActions) with its
// arguments, as the models emit them.
//
//   - screenshot {width?, format?, quality?}: the image, base64 in the answer.
//   - cursor_position: the pointer's position.
//   - mouse_move {coordinate}.
//   - left_click, right_click, middle_click, double_click, triple_click
//     {coordinate? (default: where the pointer is), text? (modifiers held,
//     "shift", "ctrl+shift")}.
//   - left_click_drag {start_coordinate? (default: the pointer), coordinate, text?}.
//   - left_mouse_down, left_mouse_up {coordinate?}.
//   - scroll {scroll_direction, scroll_amount? (default 3), coordinate?, text?}.
//   - type {text: any Unicode, at most MaxTypeChars characters}.
//   - key {text: X key names joined by '+', several combinations separated
//     by spaces}; hold_key {text, duration}.
//   - wait {duration}.
//
// Coordinates are [x, y] in the space of Scale (image width / screen width
// of the screenshot they were read from; default 1, screen pixels) and are
// mapped back to the screen. Durations are seconds, at most
// MaxDesktopWaitSecs.
type ActionRequest struct {
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

// ActionResult answers a desktop action once the screen has applied it.
// Positions are in the space of Scale (the request's); ScreenCursor is on
// the screen. A screenshot answers its image (base64 in JSON) and its
// size; cursor_position (and every action but screenshot) the pointer's
// position, also as X and Y.
type ActionResult struct {
	Action       string  `json:"action"`
	X            *int    `json:"x,omitempty"`
	Y            *int    `json:"y,omitempty"`
	Cursor       []int   `json:"cursor,omitempty"`
	ScreenCursor []int   `json:"screenCursor,omitempty"`
	ScreenWidth  int     `json:"screenWidth"`
	ScreenHeight int     `json:"screenHeight"`
	Scale        float64 `json:"scale"`
	Format       string  `json:"format,omitempty"` // screenshot: "png" or "jpeg"
	Image        []byte  `json:"image,omitempty"`  // screenshot: the image
	Width        int     `json:"width,omitempty"`  // screenshot: the image's size
	Height       int     `json:"height,omitempty"`
}

// MouseRequest is the body of POST .../desktop/mouse: action "move",
// "click", "down", "up", "drag" or "scroll".
type MouseRequest struct {
	Action     string   `json:"action"`
	Coordinate []int    `json:"coordinate,omitempty"` // [x, y]; a click, press, release or scroll without one acts where the pointer is
	Button     string   `json:"button,omitempty"`     // "left" (default), "right", "middle"
	Clicks     int      `json:"clicks,omitempty"`     // 1 (default), 2 (double) or 3 (triple)
	Modifiers  []string `json:"modifiers,omitempty"`  // keys held during a click, drag or scroll: ctrl, shift, alt, super
	Path       [][]int  `json:"path,omitempty"`       // a drag's points, at least two
	Direction  string   `json:"direction,omitempty"`  // a scroll's up, down, left or right
	Amount     int      `json:"amount,omitempty"`     // a scroll's wheel clicks (default 3, at most 100)
}

// KeyboardRequest is the body of POST .../desktop/keyboard: action "type"
// (Text, any Unicode, at most 10,000 characters), "key" (Keys: xdotool key
// names joined by '+', several combinations separated by spaces) or
// "hold_key" (Keys held for DurationMs, at most 30,000).
type KeyboardRequest struct {
	Action     string `json:"action"`
	Text       string `json:"text,omitempty"`
	Keys       string `json:"keys,omitempty"`
	DurationMs int    `json:"durationMs,omitempty"`
}

// WaitRequest is the body of POST .../desktop/wait (at most 30,000 ms).
type WaitRequest struct {
	DurationMs int `json:"durationMs"`
}

// DesktopResult answers a desktop action once the screen has applied it:
// the pointer's position and the screen's size.
type DesktopResult struct {
	Cursor       []int `json:"cursor"`
	ScreenWidth  int   `json:"screenWidth"`
	ScreenHeight int   `json:"screenHeight"`
}

// DesktopScreenshot takes a screenshot of the agent's desktop.
func (c *Client) DesktopScreenshot(ctx context.Context, agent string, r ScreenshotRequest) (*Screenshot, error) {
	if agent == "" || agent == "." || agent == ".." {
		return nil, ErrAgentID
	}
	var raw rawAnswer
	err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/agents/" + url.PathEscape(agent) + "/computer/desktop/screenshot",
		in: r, raw: &raw, repeatable: true,
	})
	if err != nil {
		return nil, err
	}
	return ScreenshotFromAnswer(raw.header, raw.body), nil
}

// ScreenshotFromAnswer reads a screenshot's answer: its headers and body.
func ScreenshotFromAnswer(h http.Header, body []byte) *Screenshot {
	atoi := func(k string) int { n, _ := strconv.Atoi(h.Get(k)); return n }
	s := &Screenshot{Format: "png", Data: body, Width: atoi(HeaderImageWidth), Height: atoi(HeaderImageHeight),
		ScreenWidth: atoi(HeaderScreenWidth), ScreenHeight: atoi(HeaderScreenHeight)}
	if h.Get("Content-Type") == "image/jpeg" {
		s.Format = "jpeg"
	}
	s.Scale, _ = strconv.ParseFloat(h.Get(HeaderScale), 64)
	return s
}

// DesktopCursor returns the pointer's position.
func (c *Client) DesktopCursor(ctx context.Context, agent string) (*DesktopResult, error) {
	var out *DesktopResult
	return out, c.agentCall(ctx, http.MethodGet, agent, "/desktop/cursor", nil, &out)
}

// DesktopMouse moves, clicks, drags or scrolls.
func (c *Client) DesktopMouse(ctx context.Context, agent string, r MouseRequest) (*DesktopResult, error) {
	var out *DesktopResult
	return out, c.agentCall(ctx, http.MethodPost, agent, "/desktop/mouse", r, &out)
}

// DesktopKeyboard types text or presses keys.
func (c *Client) DesktopKeyboard(ctx context.Context, agent string, r KeyboardRequest) (*DesktopResult, error) {
	var out *DesktopResult
	return out, c.agentCall(ctx, http.MethodPost, agent, "/desktop/keyboard", r, &out)
}

// DesktopAction runs one action of the computer-use vocabulary.
func (c *Client) DesktopAction(ctx context.Context, agent string, r ActionRequest) (*ActionResult, error) {
	var out *ActionResult
	return out, c.agentCall(ctx, http.MethodPost, agent, "/desktop/action", r, &out)
}

// DesktopWait waits on the computer, then answers the pointer's position.
func (c *Client) DesktopWait(ctx context.Context, agent string, r WaitRequest) (*DesktopResult, error) {
	var out *DesktopResult
	return out, c.agentCall(ctx, http.MethodPost, agent, "/desktop/wait", r, &out)
}
