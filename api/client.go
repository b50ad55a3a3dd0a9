// Package api is the supervisor's REST API as both sides speak it, and its Go client for the supervisor's REST API: agents,
// computer connections, the five computer tools, usage and health.
//
// Every call that changes an agent's computer (the tool calls, stop,
// disconnect, confirm-cleanup) carries an Idempotency-Key header. The key is
// random per logical call (or taken from the context, see
// WithIdempotencyKey) and is reused when the client repeats the request
// itself, so a retried tool call returns the first outcome instead of
// running twice. The client repeats a request only on a transport error, a
// 503 answer or a rate limit's 429, a bounded number of times with jittered
// backoff (or the Retry-After asked for), and only while its context lives.
// Requests that are not safe to repeat (creating an agent, connecting a
// provider) carry no key and are repeated only after a 503 or a 429 or when
// they never reached the supervisor.
package api

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berthdev/berth/internal/httpjson"
)

// Defaults of the retry policy.
const (
	DefaultMaxAttempts = 4
	DefaultMinBackoff  = 250 * time.Millisecond
	DefaultMaxBackoff  = 4 * time.Second
)

// maxRetryAfter is the longest Retry-After the client waits for; a longer
// one ends the retries.
const maxRetryAfter = 30 * time.Second

// maxAnswerBytes bounds the body of an answer.
const maxAnswerBytes = 32 << 20

// maxErrorBytes bounds the body of an error answer.
const maxErrorBytes = 64 << 10

// Client calls one supervisor. It is safe for concurrent use.
type Client struct {
	base        string // scheme://host[/prefix], without a trailing slash
	token       string
	hc          *http.Client
	userAgent   string
	maxAttempts int
	minBackoff  time.Duration
	maxBackoff  time.Duration
	sleep       func(context.Context, time.Duration) error
	newKey      func() string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithMaxAttempts sets how many times one call is sent at most, the first
// attempt included; 1 turns retries off.
func WithMaxAttempts(n int) Option {
	return func(c *Client) { c.maxAttempts = max(n, 1) }
}

// WithBackoff sets the wait before the first retry and the cap that the
// doubling wait does not pass. Each wait is jittered between half and all
// of its value.
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(c *Client) {
		c.minBackoff = max(minWait, 0)
		c.maxBackoff = max(maxWait, c.minBackoff)
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client of the supervisor at baseURL (for example
// http://127.0.0.1:8080, optionally with a path prefix) that authenticates
// with token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: supervisor URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: supervisor URL %q: want http://HOST[:PORT] or https://HOST[:PORT]", baseURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: supervisor URL %q: no user, query or fragment allowed", baseURL)
	}
	c := &Client{
		base:        u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		token:       token,
		hc:          &http.Client{},
		userAgent:   "berth-client",
		maxAttempts: DefaultMaxAttempts,
		minBackoff:  DefaultMinBackoff,
		maxBackoff:  DefaultMaxBackoff,
		sleep:       sleep,
		newKey:      cryptorand.Text,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL returns the supervisor's URL the client calls.
func (c *Client) BaseURL() string { return c.base }

type keyCtx struct{}

// WithIdempotencyKey returns a context under which the next call sends key
// as its Idempotency-Key instead of a random one. A caller that may repeat
// a call across restarts (for example from a stored call id) uses it so
// that the supervisor recognises the repeat.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

type rawCtx struct{}

// WithRawAnswer returns a context under which every successful call also
// stores the body of its answer, as the supervisor sent it, in *dst (empty
// when the answer had none). It lets a caller show fields that the typed
// results do not carry.
func WithRawAnswer(ctx context.Context, dst *json.RawMessage) context.Context {
	return context.WithValue(ctx, rawCtx{}, dst)
}

// request is one logical call.
type request struct {
	method string
	path   string // escaped, below the base URL
	query  url.Values
	in     any        // JSON body, or nil
	out    any        // where a 2xx answer is decoded, or nil
	raw    *rawAnswer // where a 2xx answer is kept as it is (an image), or nil
	noAuth bool
	// keyed calls send an Idempotency-Key.
	keyed bool
	// repeatable calls may be sent again after they may have reached the
	// supervisor: sending them twice has the effect of sending them once.
	repeatable bool
}

// rawAnswer is a 2xx answer kept as the supervisor sent it.
type rawAnswer struct {
	header http.Header
	body   []byte
}

// do sends r, repeating it while that is safe and useful.
func (c *Client) do(ctx context.Context, r request) error {
	var body []byte
	if r.in != nil {
		var err error
		if body, err = json.Marshal(r.in); err != nil {
			return fmt.Errorf("client: encode %s %s: %w", r.method, r.path, err)
		}
	}
	var key string
	if r.keyed {
		key, _ = ctx.Value(keyCtx{}).(string)
		if key == "" {
			key = c.newKey()
		}
	}
	reached := false // an earlier attempt may have reached the supervisor
	for attempt := 1; ; attempt++ {
		retry, wait, err := c.once(ctx, r, body, key)
		var apiErr *APIError
		if reached && r.method == http.MethodDelete && errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			// An earlier attempt whose answer was lost did the deletion.
			return nil
		}
		if err == nil || !retry || attempt >= c.maxAttempts || ctx.Err() != nil {
			return err
		}
		if !errors.As(err, &apiErr) && !neverSent(err) {
			reached = true
		}
		if d := c.backoff(attempt); d > wait {
			wait = d
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (while retrying after: %v)", serr, err)
		}
	}
}

// once sends r a single time. It reports whether the call may be repeated
// and the least wait the supervisor asked for.
func (c *Client) once(ctx context.Context, r request, body []byte, key string) (retry bool, wait time.Duration, err error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, rd)
	if err != nil {
		return false, 0, fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
	}
	if r.raw == nil {
		req.Header.Set("Accept", "application/json")
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if !r.noAuth && c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if h, _ := ctx.Value(holderCtx{}).(string); h != "" {
		req.Header.Set(HeaderDesktopHolder, h)
	}

	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, err
		}
		return r.repeatable || neverSent(err), 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e, err := httpjson.ReadError(resp, maxErrorBytes)
		if err != nil {
			// The supervisor answered, so the call happened; only a call
			// that is safe to repeat may ask for that answer again.
			return r.repeatable && ctx.Err() == nil, 0, fmt.Errorf("client: %s %s: read answer: %w", r.method, r.path, err)
		}
		apiErr := decodeError(resp, e)
		// 503 and 429 (a rate limit, answered before the call is looked
		// at) are the answers worth waiting out.
		if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests {
			return false, 0, apiErr
		}
		wait, ok := retryAfter(resp.Header.Get("Retry-After"))
		return ok, wait, apiErr
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		// As above: the call happened.
		return r.repeatable && ctx.Err() == nil, 0, fmt.Errorf("client: %s %s: read answer: %w", r.method, r.path, err)
	}
	if len(data) > maxAnswerBytes {
		return false, 0, fmt.Errorf("client: %s %s: answer larger than %d bytes", r.method, r.path, maxAnswerBytes)
	}
	if r.raw != nil {
		r.raw.header, r.raw.body = resp.Header, data
		return false, 0, nil
	}
	data = bytes.TrimSpace(data)
	if r.out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, r.out); err != nil {
			return false, 0, fmt.Errorf("client: %s %s: decode answer: %w", r.method, r.path, err)
		}
	}
	if dst, ok := ctx.Value(rawCtx{}).(*json.RawMessage); ok && dst != nil {
		*dst = json.RawMessage(data)
	}
	return false, 0, nil
}

// neverSent reports whether err shows that the request did not reach the
// supervisor (the connection was never made), so that repeating it is safe
// whatever it does.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// retryAfter parses a Retry-After header in seconds. It reports false when
// the supervisor asks for a longer wait than the client is willing to spend.
func retryAfter(h string) (time.Duration, bool) {
	if h == "" {
		return 0, true
	}
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n >= 0 {
		d := time.Duration(n) * time.Second
		return d, d <= maxRetryAfter
	}
	if t, err := http.ParseTime(h); err == nil {
		d := max(time.Until(t), 0)
		return d, d <= maxRetryAfter
	}
	return 0, true
}

// backoff returns the jittered wait after the given attempt: between half
// and all of minBackoff doubled per attempt, capped at maxBackoff.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.minBackoff
	for i := 1; i < attempt && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// decodeError turns a non-2xx answer, read as e, into an *APIError.
func decodeError(resp *http.Response, e *httpjson.Error) *APIError {
	out := &APIError{Status: e.Status}
	if e.Code != "" {
		out.Code, out.Message = e.Code, e.Message
		return out
	}
	// Not the supervisor's envelope: keep a short plain-text body (a proxy's
	// message), never an HTML page.
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if text := e.Message; mt == "text/plain" && text != "" && utf8.ValidString(text) {
		line, _, _ := strings.Cut(text, "\n")
		if r := []rune(line); len(r) > 200 {
			line = string(r[:200]) + "…"
		}
		out.Message = line
	}
	return out
}
