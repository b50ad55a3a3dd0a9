package browser

import (
	"context"
	"net/http"

	"github.com/berthdev/berth/internal/httpjson"
)

// Client calls a computer's browser tools with the computer's token. It
// implements Tools; a remote failure is the *httpjson.Error computerd
// answered.
type Client struct {
	c httpjson.Caller
}

// NewClient returns a client for the computerd at baseURL. hc and header
// may be nil.
func NewClient(baseURL, token string, hc *http.Client, header http.Header) *Client {
	return &Client{c: httpjson.Caller{Base: baseURL, Token: token, HTTP: hc, Header: header, Code: CodeBrowserFailed, Name: "browser"}}
}

// Answer limits: a page description, a tab list, a snapshot, an evaluation
// and a screenshot (base64) with room for their JSON.
const (
	smallAnswerBytes      = 64 << 10
	snapshotAnswerBytes   = 2*MaxSnapshotBytes + 64<<10
	evaluateAnswerBytes   = MaxEvaluateBytes + 64<<10
	screenshotAnswerBytes = MaxScreenshotBytes/3*4 + 64<<10
)

// Navigate implements Tools.
func (c *Client) Navigate(ctx context.Context, req NavigateRequest) (Page, error) {
	var p Page
	return p, c.call(ctx, PathNavigate, req, &p, smallAnswerBytes)
}

// Snapshot implements Tools.
func (c *Client) Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	var s Snapshot
	return s, c.call(ctx, PathSnapshot, req, &s, snapshotAnswerBytes)
}

// Click implements Tools.
func (c *Client) Click(ctx context.Context, req ClickRequest) (Page, error) {
	var p Page
	return p, c.call(ctx, PathClick, req, &p, smallAnswerBytes)
}

// Type implements Tools.
func (c *Client) Type(ctx context.Context, req TypeRequest) (Page, error) {
	var p Page
	return p, c.call(ctx, PathType, req, &p, smallAnswerBytes)
}

// Press implements Tools.
func (c *Client) Press(ctx context.Context, req PressRequest) (Page, error) {
	var p Page
	return p, c.call(ctx, PathPress, req, &p, smallAnswerBytes)
}

// Scroll implements Tools.
func (c *Client) Scroll(ctx context.Context, req ScrollRequest) (Page, error) {
	var p Page
	return p, c.call(ctx, PathScroll, req, &p, smallAnswerBytes)
}

// Screenshot implements Tools.
func (c *Client) Screenshot(ctx context.Context, req ScreenshotRequest) (Screenshot, error) {
	var s Screenshot
	return s, c.call(ctx, PathScreenshot, req, &s, screenshotAnswerBytes)
}

// Tabs implements Tools.
func (c *Client) Tabs(ctx context.Context, req TabsRequest) (Tabs, error) {
	var t Tabs
	return t, c.call(ctx, PathTabs, req, &t, smallAnswerBytes)
}

// Wait implements Tools.
func (c *Client) Wait(ctx context.Context, req WaitRequest) (Page, error) {
	var p Page
	return p, c.call(ctx, PathWait, req, &p, smallAnswerBytes)
}

// Evaluate implements Tools.
func (c *Client) Evaluate(ctx context.Context, req EvaluateRequest) (Evaluation, error) {
	var e Evaluation
	return e, c.call(ctx, PathEvaluate, req, &e, evaluateAnswerBytes)
}

func (c *Client) call(ctx context.Context, path string, in, out any, limit int64) error {
	return c.c.Call(ctx, http.MethodPost, path, in, out, limit)
}

var _ Tools = (*Client)(nil)
