package desktop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// Client calls a computer's desktop endpoints with the computer's token.
type Client struct {
	base  string
	token string
	hc    *http.Client
	hdr   http.Header
}

// NewClient returns a client for the computerd at baseURL. hc and header
// may be nil.
func NewClient(baseURL, token string, hc *http.Client, header http.Header) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc, hdr: header}
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

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out)
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		e, _ := httpjson.ReadError(resp, 64<<10)
		if e.Code == "" {
			e.Code = computerd.CodeInternal
		}
		return nil, &RemoteError{Status: e.Status, Code: e.Code, Message: e.Message}
	}
	return resp, nil
}

// RemoteError is an error answer from computerd.
type RemoteError struct {
	Status  int
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("computerd %d %s: %s", e.Status, e.Code, e.Message)
}
