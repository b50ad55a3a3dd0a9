// Package httpapi sends the JSON API calls of the hosted providers that
// speak plain REST (boat, browserbase, browseruse) and maps their answers
// to the providers errors, so that the supervisor answers each the same
// way: a refused key, no room, a machine that is gone, a request the
// provider turned down for sure, or an outage.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/providers"
)

// MaxAnswer is the most of an answer that is read.
const MaxAnswer = 4 << 20

// CodeRefused is the error code of a request the provider turned down as
// malformed or out of its bounds (400, 422): nothing was made, and sending
// it again would not help.
const CodeRefused = "provider_refused"

// ErrPlain, as the kind a Client's Failure returns, says that the answer
// means none of the providers errors: the call's error carries the
// provider's message alone (a 404 to a create is no machine gone).
var ErrPlain = errors.New("no providers error")

// Client sends one provider's API calls.
type Client struct {
	// BaseURL is prefixed to each call's path.
	BaseURL string
	HTTP    *http.Client
	// Timeout bounds each call (default 30 s).
	Timeout time.Duration
	// KeyName is the credential a call needs, named when it is missing.
	KeyName string
	// Auth puts the key on a request's header.
	Auth func(h http.Header, key string)
	// Failure reads an error answer: the provider's own message, and the
	// providers error it means where the status alone does not say (nil:
	// by the status, as Status maps it; ErrPlain: none of them).
	Failure func(status int, body []byte) (msg string, kind error)
}

// Call is one request.
type Call struct {
	Method, Path string
	Header       http.Header
	Body         any // sent as JSON when not nil
	// Reply, when not nil, receives the answer's header (a page token,
	// Retry-After), whatever its status.
	Reply http.Header
}

// Do sends c with key and decodes a 2xx answer into out (when out is not
// nil and the answer has a body). It returns the answer's status, 0 when
// none came. Errors name the call by method and path (without its query),
// never the key or the URL's host.
func (cl *Client) Do(ctx context.Context, key string, c Call, out any) (int, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: no %s in the connection's credentials", providers.ErrBadCredentials, cl.KeyName)
	}
	name, _, _ := strings.Cut(c.Path, "?")
	name = c.Method + " " + name
	var rd io.Reader
	if c.Body != nil {
		raw, err := json.Marshal(c.Body)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		rd = bytes.NewReader(raw)
	}
	timeout := cl.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, c.Method, cl.BaseURL+c.Path, rd)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	cl.Auth(req.Header, key)
	req.Header.Set("Accept", "application/json")
	if c.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.HTTP.Do(req)
	if err != nil {
		return 0, Unreachable(name, err)
	}
	defer resp.Body.Close()
	if c.Reply != nil {
		for k, v := range resp.Header {
			c.Reply[k] = v
		}
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if resp.StatusCode >= 300 {
		var msg string
		var kind error
		if cl.Failure != nil {
			msg, kind = cl.Failure(resp.StatusCode, raw)
		}
		msg = Redact(fmt.Sprintf("%s: %d %s", name, resp.StatusCode, strings.TrimSpace(msg)), key)
		switch kind {
		case nil:
			return resp.StatusCode, StatusError(resp.StatusCode, msg)
		case ErrPlain:
			return resp.StatusCode, errors.New(msg)
		}
		return resp.StatusCode, fmt.Errorf("%w: %s", kind, msg)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%w: %s: unreadable answer", providers.ErrUnavailable, name)
		}
	}
	return resp.StatusCode, nil
}

// Status returns the providers error an HTTP error status means: 401 and
// 403 a refused key, 404 a machine that is gone, 402 and 429 no quota or
// room, 400 and 422 a request refused for sure (providers.ErrRefused),
// anything else an outage.
func Status(code int) error {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return providers.ErrBadCredentials
	case http.StatusNotFound:
		return providers.ErrNotFound
	case http.StatusPaymentRequired, http.StatusTooManyRequests:
		return providers.ErrCapacity
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return providers.ErrRefused
	}
	return providers.ErrUnavailable
}

// StatusError is the error of an answer with status code, msg saying
// what the provider answered. A refusal is a *providers.RefusedError, so
// that the supervisor answers it as 422 with the provider's message
// rather than as an outage.
func StatusError(code int, msg string) error {
	kind := Status(code)
	if kind == providers.ErrRefused {
		return &providers.RefusedError{Status: http.StatusUnprocessableEntity, Code: CodeRefused, Message: "the provider refused the request: " + msg}
	}
	return fmt.Errorf("%w: %s", kind, msg)
}

// Unreachable is the error of a call (name: its method and path) that got
// no answer: an outage, with the cause but not the URL, whose host or
// query may carry what is not to be shown.
func Unreachable(name string, err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%w: %s: %v", providers.ErrUnavailable, name, err)
}

// Redact replaces each secret in s.
func Redact(s string, secrets ...string) string {
	for _, k := range secrets {
		if k != "" {
			s = strings.ReplaceAll(s, k, "[redacted]")
		}
	}
	return s
}

// BaseURL checks that raw, the value of setting, is an http(s) URL with a
// host and no user info, and returns it without a trailing slash. The
// error names the setting and example, a URL of the right form.
func BaseURL(setting, raw, example string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		shown := raw
		if err == nil && u.User != nil {
			shown = u.Redacted() // a password in the URL is not repeated
		}
		return "", fmt.Errorf("%s=%q: want an https URL with no user info, such as %s", setting, shown, example)
	}
	return strings.TrimRight(raw, "/"), nil
}

// NewHTTPClient returns a client for one provider's API calls, keeping a
// few connections to it open between calls.
func NewHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
}

// CheckKey checks a connection's credentials for provider where they are
// one API key, name, and the optional others: a foreign credential, or a
// key that is missing or has white space, is an error naming it; want
// says where the key comes from.
func CheckKey(provider string, c map[string]string, name, want string, optional ...string) error {
	for k := range c {
		if k != name && !slices.Contains(optional, k) {
			msg := fmt.Sprintf("%q is not a %s credential: want %q", k, provider, name)
			for _, o := range optional {
				msg += fmt.Sprintf(" and optional %q", o)
			}
			return errors.New(msg)
		}
	}
	if k := c[name]; strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t\r\n") {
		return fmt.Errorf("%s is missing or has white space: want %s", name, want)
	}
	return nil
}
