package desktop

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// Paths computerd serves when the desktop is configured.
const (
	PathOffer      = "/v1/desktop/offer"
	PathWarm       = "/v1/desktop/warm"
	PathStatus     = "/v1/desktop"
	PathScreenshot = "/v1/screenshot"

	// Desktop actions: a screenshot with a format and a scale, the
	// pointer's position, mouse and keyboard input, and a bounded wait.
	PathShot     = "/v1/desktop/screenshot"
	PathCursor   = "/v1/desktop/cursor"
	PathMouse    = "/v1/desktop/mouse"
	PathKeyboard = "/v1/desktop/keyboard"
	PathWait     = "/v1/desktop/wait"
)

// Codecs the streamer encodes.
const (
	CodecH264 = "h264"
	CodecVP8  = "vp8"
)

// ICEServer is one ICE server for the computer's side of a viewer's
// connection. When URLs is empty, computerd uses the relay named by its
// TURN_PUBLIC_HOST and TURN_PORT.
type ICEServer struct {
	URLs       []string `json:"urls,omitempty"`
	Username   string   `json:"username"`
	Credential string   `json:"credential"`
}

// OfferRequest is a viewer's SDP offer, forwarded by the supervisor with
// the TURN credentials the computer uses for this viewer.
type OfferRequest struct {
	SDP        string      `json:"sdp"`
	ICEServers []ICEServer `json:"iceServers"`
	// Codec forces CodecH264 or CodecVP8; empty picks H264 when the offer
	// has it, VP8 otherwise.
	Codec string `json:"codec,omitempty"`
	// Viewer names the viewer in logs.
	Viewer string `json:"viewer,omitempty"`
}

// OfferAnswer is computerd's SDP answer, with every ICE candidate in it.
type OfferAnswer struct {
	SDP    string `json:"sdp"`
	Codec  string `json:"codec"`
	Viewer string `json:"viewer"`
}

// WarmRequest starts an encoder before a viewer connects, so the first
// frame does not wait for the encoder to start. It stops after the idle
// time if no viewer comes.
type WarmRequest struct {
	Codec string `json:"codec,omitempty"` // default CodecH264
}

// Status is GET /v1/desktop.
type Status struct {
	Display  string          `json:"display"`
	Width    int             `json:"width"`
	Height   int             `json:"height"`
	FPS      int             `json:"fps"`
	Viewers  int             `json:"viewers"`
	Encoders []EncoderStatus `json:"encoders"`
}

// EncoderStatus describes one running encoder.
type EncoderStatus struct {
	Codec     string    `json:"codec"`
	PID       int       `json:"pid"`
	Viewers   int       `json:"viewers"`
	Frames    int64     `json:"frames"`
	Bytes     int64     `json:"bytes"`
	StartedAt time.Time `json:"startedAt"`
}

// Limits of the desktop actions.
const (
	MaxTypeChars       = 10000            // characters of one type action
	MaxKeyChars        = 1000             // characters of a key or hold_key's keys
	MaxWait            = 30 * time.Second // a wait, or a hold_key's duration
	MaxScrollAmount    = 100              // wheel clicks of one scroll
	MaxDragPoints      = 1000             // points of one drag's path
	MaxClicks          = 3                // a triple click
	DefaultJPEGQuality = 80
)

// Image formats of a screenshot.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
)

// Headers of a screenshot's answer (its body is the image): the screen's
// size and the image's scale (image width / screen width).
const (
	HeaderScreenWidth  = "Berth-Screen-Width"
	HeaderScreenHeight = "Berth-Screen-Height"
	HeaderImageWidth   = "Berth-Image-Width"
	HeaderImageHeight  = "Berth-Image-Height"
	HeaderScale        = "Berth-Scale"
)

// ShotRequest asks for a screenshot (the query of GET PathShot: format,
// quality, width).
type ShotRequest struct {
	Format  string // FormatPNG (default) or FormatJPEG
	Quality int    // JPEG quality 1..100, default DefaultJPEGQuality
	Width   int    // scale the image to this width (at most the screen's); 0 keeps the screen's size
}

// Shot is a screenshot.
type Shot struct {
	Format                    string
	Data                      []byte
	Width, Height             int // the image's size
	ScreenWidth, ScreenHeight int
	Scale                     float64 // Width / ScreenWidth
}

// Mouse actions.
const (
	MouseMove   = "move"
	MouseClick  = "click"
	MouseDown   = "down"
	MouseUp     = "up"
	MouseDrag   = "drag"
	MouseScroll = "scroll"
)

// MouseRequest is the body of POST PathMouse. Coordinates are screen
// pixels, [x, y] from the top left corner.
type MouseRequest struct {
	Action string `json:"action"`
	// Coordinate is where to move, click, press, release or scroll; a
	// click, press, release or scroll without one acts where the pointer is.
	Coordinate []int `json:"coordinate,omitempty"`
	// Button is "left" (default), "right" or "middle".
	Button string `json:"button,omitempty"`
	// Clicks is 1 (default), 2 (double) or 3 (triple) for a click.
	Clicks int `json:"clicks,omitempty"`
	// Modifiers are held during a click, a drag or a scroll: ctrl, shift,
	// alt, super (or any key name).
	Modifiers []string `json:"modifiers,omitempty"`
	// Path is a drag's points, the first where the button is pressed and
	// the last where it is released (at least two).
	Path [][]int `json:"path,omitempty"`
	// Direction is a scroll's "up", "down", "left" or "right"; Amount its
	// wheel clicks (default 3).
	Direction string `json:"direction,omitempty"`
	Amount    int    `json:"amount,omitempty"`
}

// Keyboard actions.
const (
	KeyType  = "type"
	KeyPress = "key"
	KeyHold  = "hold_key"
)

// KeyboardRequest is the body of POST PathKeyboard.
type KeyboardRequest struct {
	Action string `json:"action"`
	// Text is what a type action types: any Unicode, at most MaxTypeChars
	// characters; "\n" presses Return.
	Text string `json:"text,omitempty"`
	// Keys is a key or hold_key action's combinations, xdotool key names
	// joined with '+' ("ctrl+c", "Return", "ctrl+shift+t"); a key action
	// takes several separated by spaces, pressed one after the other.
	Keys string `json:"keys,omitempty"`
	// DurationMs is how long a hold_key holds its keys (at most MaxWait).
	DurationMs int `json:"durationMs,omitempty"`
}

// WaitRequest is the body of POST PathWait.
type WaitRequest struct {
	DurationMs int `json:"durationMs"` // at most MaxWait
}

// ActionResult answers an action once the X server has applied it: the
// pointer's position then and the screen's size.
type ActionResult struct {
	Cursor       []int `json:"cursor"`
	ScreenWidth  int   `json:"screenWidth"`
	ScreenHeight int   `json:"screenHeight"`
}

// Client calls a computer's desktop endpoints with the computer's token.
// A remote failure is the *RemoteError computerd answered.
type Client struct {
	c httpjson.Caller
}

// NewClient returns a client for the computerd at baseURL. hc and header
// may be nil.
func NewClient(baseURL, token string, hc *http.Client, header http.Header) *Client {
	return &Client{c: httpjson.Caller{Base: baseURL, Token: token, HTTP: hc, Header: header, Code: computerd.CodeInternal, Name: "desktop"}}
}

// Offer sends a viewer's offer and returns the answer.
func (c *Client) Offer(ctx context.Context, req OfferRequest) (OfferAnswer, error) {
	var a OfferAnswer
	return a, c.call(ctx, http.MethodPost, PathOffer, req, &a)
}

// Warm starts an encoder ahead of a viewer.
func (c *Client) Warm(ctx context.Context, req WarmRequest) (Status, error) {
	var s Status
	return s, c.call(ctx, http.MethodPost, PathWarm, req, &s)
}

// Status returns the desktop's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.call(ctx, http.MethodGet, PathStatus, nil, &s)
}

// Screenshot returns a PNG of the screen.
func (c *Client) Screenshot(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, PathScreenshot, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// Shot takes a screenshot.
func (c *Client) Shot(ctx context.Context, req ShotRequest) (Shot, error) {
	q := url.Values{}
	if req.Format != "" {
		q.Set("format", req.Format)
	}
	if req.Quality != 0 {
		q.Set("quality", strconv.Itoa(req.Quality))
	}
	if req.Width != 0 {
		q.Set("width", strconv.Itoa(req.Width))
	}
	path := PathShot
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return Shot{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Shot{}, err
	}
	return ShotFromHeader(resp.Header, data), nil
}

// ShotFromHeader reads a screenshot's answer.
func ShotFromHeader(h http.Header, data []byte) Shot {
	atoi := func(k string) int { n, _ := strconv.Atoi(h.Get(k)); return n }
	s := Shot{Format: FormatPNG, Data: data, Width: atoi(HeaderImageWidth), Height: atoi(HeaderImageHeight),
		ScreenWidth: atoi(HeaderScreenWidth), ScreenHeight: atoi(HeaderScreenHeight)}
	if h.Get("Content-Type") == "image/jpeg" {
		s.Format = FormatJPEG
	}
	s.Scale, _ = strconv.ParseFloat(h.Get(HeaderScale), 64)
	return s
}

// SetShotHeader sets the headers of a screenshot's answer.
func SetShotHeader(h http.Header, s Shot) {
	h.Set("Content-Type", "image/"+s.Format)
	h.Set("Content-Length", strconv.Itoa(len(s.Data)))
	h.Set(HeaderImageWidth, strconv.Itoa(s.Width))
	h.Set(HeaderImageHeight, strconv.Itoa(s.Height))
	h.Set(HeaderScreenWidth, strconv.Itoa(s.ScreenWidth))
	h.Set(HeaderScreenHeight, strconv.Itoa(s.ScreenHeight))
	h.Set(HeaderScale, strconv.FormatFloat(s.Scale, 'f', -1, 64))
}

// Cursor returns the pointer's position.
func (c *Client) Cursor(ctx context.Context) (ActionResult, error) {
	var a ActionResult
	return a, c.call(ctx, http.MethodGet, PathCursor, nil, &a)
}

// Mouse moves, clicks, drags or scrolls.
func (c *Client) Mouse(ctx context.Context, req MouseRequest) (ActionResult, error) {
	var a ActionResult
	return a, c.call(ctx, http.MethodPost, PathMouse, req, &a)
}

// Keyboard types text or presses keys.
func (c *Client) Keyboard(ctx context.Context, req KeyboardRequest) (ActionResult, error) {
	var a ActionResult
	return a, c.call(ctx, http.MethodPost, PathKeyboard, req, &a)
}

// Wait waits on the computer, then answers like an action.
func (c *Client) Wait(ctx context.Context, req WaitRequest) (ActionResult, error) {
	var a ActionResult
	return a, c.call(ctx, http.MethodPost, PathWait, req, &a)
}

// maxAnswerBytes bounds the JSON answers of the desktop endpoints.
const maxAnswerBytes = 4 << 20

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	return c.c.Call(ctx, method, path, in, out, maxAnswerBytes)
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	return c.c.Send(ctx, method, path, body)
}

// RemoteError is an error answer from computerd: its status, code and
// message.
type RemoteError = httpjson.Error
