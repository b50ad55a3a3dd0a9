package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/berthdev/berth/internal/httpjson"
)

// maxAnswer bounds a JSON answer the client reads; a screenshot may be
// larger (maxScreenshot).
const (
	maxAnswer     = 8 << 20
	maxScreenshot = 64 << 20
)

// Client calls an agent's control API over its unix socket. It is safe for
// concurrent use.
type Client struct {
	hc *http.Client
}

// APIError is an error answer of the control API.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
}

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client {
	d := &net.Dialer{}
	return &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 4,
		DisableCompression:  true,
	}}}
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Status returns the agent's state at a glance.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodGet, PathStatus, nil, &s)
}

// Sessions lists the computers running on this machine.
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	var s []Session
	return s, c.do(ctx, http.MethodGet, PathSessions, nil, &s)
}

// StopSession stops a running computer by its id.
func (c *Client) StopSession(ctx context.Context, id string) (Session, error) {
	var s Session
	return s, c.do(ctx, http.MethodPost, withID(PathSessionStop, id), nil, &s)
}

// Screenshot returns a computer's screen as PNG.
func (c *Client) Screenshot(ctx context.Context, id string) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, withID(PathScreenshot, id), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxScreenshot+1))
	if err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	if len(b) > maxScreenshot {
		return nil, fmt.Errorf("screenshot: larger than %d bytes", maxScreenshot)
	}
	return b, nil
}

// Approvals lists the sessions waiting for the owner.
func (c *Client) Approvals(ctx context.Context) ([]Approval, error) {
	var a []Approval
	return a, c.do(ctx, http.MethodGet, PathApprovals, nil, &a)
}

// Approve lets a waiting session start.
func (c *Client) Approve(ctx context.Context, id string) (Approval, error) {
	var a Approval
	return a, c.do(ctx, http.MethodPost, withID(PathApprove, id), nil, &a)
}

// Deny refuses a waiting session.
func (c *Client) Deny(ctx context.Context, id string) (Approval, error) {
	var a Approval
	return a, c.do(ctx, http.MethodPost, withID(PathDeny, id), nil, &a)
}

// Settings returns the owner's limits.
func (c *Client) Settings(ctx context.Context) (Settings, error) {
	var s Settings
	return s, c.do(ctx, http.MethodGet, PathSettings, nil, &s)
}

// SetSettings replaces every limit and returns them as stored.
func (c *Client) SetSettings(ctx context.Context, s Settings) (Settings, error) {
	var out Settings
	return out, c.do(ctx, http.MethodPut, PathSettings, s, &out)
}

// UpdateSettings changes the limits that u sets and returns them all.
func (c *Client) UpdateSettings(ctx context.Context, u SettingsUpdate) (Settings, error) {
	var out Settings
	return out, c.do(ctx, http.MethodPatch, PathSettings, u, &out)
}

// SetLending turns lending on or off.
func (c *Client) SetLending(ctx context.Context, on bool) (Settings, error) {
	return c.UpdateSettings(ctx, SettingsUpdate{Lending: &on})
}

// Usage returns today's lending and the last days (0 means 14).
func (c *Client) Usage(ctx context.Context, days int) (Usage, error) {
	p := PathUsage
	if days > 0 {
		p += "?days=" + strconv.Itoa(days)
	}
	var u Usage
	return u, c.do(ctx, http.MethodGet, p, nil, &u)
}

// Cleanups lists the leftovers waiting for the owner's decision.
func (c *Client) Cleanups(ctx context.Context) ([]CleanupPrompt, error) {
	var p []CleanupPrompt
	return p, c.do(ctx, http.MethodGet, PathCleanups, nil, &p)
}

// RemoveLeftover deletes a leftover from Docker.
func (c *Client) RemoveLeftover(ctx context.Context, id string) (CleanupPrompt, error) {
	var p CleanupPrompt
	return p, c.do(ctx, http.MethodPost, withID(PathCleanupRemove, id), nil, &p)
}

// KeepLeftover leaves a leftover in place and stops asking about it.
func (c *Client) KeepLeftover(ctx context.Context, id string) (CleanupPrompt, error) {
	var p CleanupPrompt
	return p, c.do(ctx, http.MethodPost, withID(PathCleanupKeep, id), nil, &p)
}

func withID(pattern, id string) string {
	return strings.Replace(pattern, "{id}", url.PathEscape(id), 1)
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://berth-agent"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("control API %s %s: %w", method, path, err)
	}
	return resp, nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out); err != nil {
		return fmt.Errorf("control API %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

func readError(resp *http.Response) error {
	e, _ := httpjson.ReadError(resp, 64<<10)
	if e.Code == "" {
		e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	}
	return &APIError{Status: e.Status, Code: e.Code, Message: e.Message}
}
