package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ErrAnswerTooLarge is wrapped by the error of a call whose answer was
// larger than its limit. Nothing past the limit is read.
var ErrAnswerTooLarge = errors.New("answer too large")

// maxErrorBytes bounds the body of an error answer a Caller reads.
const maxErrorBytes = 64 << 10

// Caller makes JSON calls to one server: a bearer token and extra headers
// on every request, answers read through a limit, and error answers
// returned as the server's *Error.
type Caller struct {
	// Base is the server's URL; paths are appended to it.
	Base string
	// Token, when set, is sent as a bearer token.
	Token string
	// HTTP sends the requests; nil is http.DefaultClient.
	HTTP *http.Client
	// Header is added to every request.
	Header http.Header
	// Code is the code of an error answer whose body is not the envelope
	// (a proxy's error page, say); its message is then the body's text,
	// or the status.
	Code string
	// Name names the server in errors that are not its answers.
	Name string
}

// Call sends in as JSON (no body when nil) and decodes a 2xx answer of at
// most limit bytes into out (discarded when out is nil). Any other status
// is the server's *Error.
func (c *Caller) Call(ctx context.Context, method, path string, in, out any, limit int64) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", c.Name, path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.Send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", c.Name, path, err)
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("%s %s: %w: over %d bytes", c.Name, path, ErrAnswerTooLarge, limit)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", c.Name, path, err)
	}
	return nil
}

// Send sends the request and returns a 2xx answer for the caller to read
// and close (an image, say). A body is sent as JSON. Any other status is
// the server's *Error, its body read through a limit.
func (c *Caller) Send(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.Name, path, err)
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.Name, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	e, _ := ReadError(resp, maxErrorBytes)
	if e.Code == "" {
		e.Code = c.Code
		if e.Message == "" {
			e.Message = resp.Status
		}
	}
	return nil, e
}
