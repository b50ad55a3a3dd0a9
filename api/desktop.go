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

// Headers of a desktop screenshot's answer, whose body is the image.
const (
	HeaderScreenWidth  = "Berth-Screen-Width"
	HeaderScreenHeight = "Berth-Screen-Height"
	HeaderImageWidth   = "Berth-Image-Width"
	HeaderImageHeight  = "Berth-Image-Height"
	HeaderScale        = "Berth-Scale"
)

// ScreenshotRequest asks for a screenshot: GET
// /v1/agents/{agent}/computer/desktop/screenshot?format=&quality=&width=.
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
	q := url.Values{}
	if r.Format != "" {
		q.Set("format", r.Format)
	}
	if r.Quality != 0 {
		q.Set("quality", strconv.Itoa(r.Quality))
	}
	if r.Width != 0 {
		q.Set("width", strconv.Itoa(r.Width))
	}
	var raw rawAnswer
	err := c.do(ctx, request{
		method: http.MethodGet, path: "/v1/agents/" + url.PathEscape(agent) + "/computer/desktop/screenshot",
		query: q, raw: &raw, repeatable: true,
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

// DesktopWait waits on the computer, then answers the pointer's position.
func (c *Client) DesktopWait(ctx context.Context, agent string, r WaitRequest) (*DesktopResult, error) {
	var out *DesktopResult
	return out, c.agentCall(ctx, http.MethodPost, agent, "/desktop/wait", r, &out)
}
