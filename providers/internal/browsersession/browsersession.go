// Package browsersession is what the hosted browser providers
// (browserbase, browseruse) share: their API client, the machine headers
// that carry a browser's CDP and live-view URLs, and the transport that
// answers the supervisor's computerd calls for a session that has no
// computerd.
package browsersession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// APIOptions describe a browser provider's API.
type APIOptions struct {
	Provider string // the provider's id, on its log lines
	// Setting names the API URL's setting; URL is its value (empty:
	// DefaultURL).
	Setting, URL, DefaultURL string
	Client                   *http.Client // nil: a client of its own
	Logger                   *slog.Logger // nil: none
	// KeyName is the API key's credential, sent in the KeyHeader header.
	KeyName, KeyHeader string
	// Message reads the provider's own message from an error answer.
	Message func(raw []byte) string
	// Refused reports an error answer that refuses the request for sure
	// though its status alone would say otherwise (Browser Use answers a
	// timeout over its limit with 403); nil: by the status only.
	Refused func(status int, raw []byte) bool
}

// API is a browser provider's API: its base URL, its calls, its log.
type API struct {
	URL    string
	Log    *slog.Logger
	client *httpapi.Client
}

// NewAPI checks o's URL and returns the API.
func NewAPI(o APIOptions) (*API, error) {
	if o.URL == "" {
		o.URL = o.DefaultURL
	}
	base, err := httpapi.BaseURL(o.Setting, o.URL, o.DefaultURL)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = httpapi.NewHTTPClient()
	}
	return &API{URL: base, Log: o.Logger.With("component", o.Provider), client: &httpapi.Client{
		BaseURL: base, HTTP: o.Client, Timeout: 30 * time.Second, KeyName: o.KeyName,
		Auth: func(h http.Header, key string) { h.Set(o.KeyHeader, key) },
		Failure: func(status int, raw []byte) (string, error) {
			var msg string
			if o.Message != nil {
				msg = o.Message(raw)
			}
			if o.Refused != nil && o.Refused(status, raw) {
				return msg, providers.ErrRefused
			}
			return msg, nil
		},
	}}, nil
}

// Call sends one API call with key; out receives a 2xx answer. Errors are
// httpapi's: they name the call, never the key. A refusal (a 400 or 422,
// or an answer APIOptions.Refused picks) is a *providers.RefusedError
// that carries the provider's message.
func (a *API) Call(ctx context.Context, key, method, path string, body, out any) error {
	_, err := a.client.Do(ctx, key, httpapi.Call{Method: method, Path: path, Body: body}, out)
	if re := (*providers.RefusedError)(nil); errors.Is(err, providers.ErrRefused) && !errors.As(err, &re) {
		msg := strings.TrimPrefix(err.Error(), providers.ErrRefused.Error()+": ")
		return &providers.RefusedError{Status: http.StatusUnprocessableEntity, Code: httpapi.CodeRefused, Message: "the provider refused the request: " + msg}
	}
	return err
}

// Headers of the machine that carry the browser's URLs.
const (
	HeaderCDPURL      = "X-Berth-Browser-Cdp-Url"
	HeaderLiveViewURL = "X-Berth-Browser-Live-View-Url"
)

// CodeNotAvailable is the error code a browser session's machine answers
// to anything but health.
const CodeNotAvailable = "not_available_on_browser_session"

// Header returns the machine header that carries cdpURL and liveViewURL.
func Header(cdpURL, liveViewURL string) http.Header {
	h := http.Header{}
	h.Set(HeaderCDPURL, cdpURL)
	h.Set(HeaderLiveViewURL, liveViewURL)
	return h
}

// URLs returns the CDP and live-view URLs that Header put on m.
func URLs(m providers.Machine) (cdpURL, liveViewURL string) {
	return m.Header.Get(HeaderCDPURL), m.Header.Get(HeaderLiveViewURL)
}

// Transport answers the supervisor's computerd calls for a browser
// session: GET …/healthz from health (version names the provider),
// everything else 422 with CodeNotAvailable. It sends nothing anywhere
// else, so the machine's headers (the CDP URL may carry a signing key)
// stay with it.
func Transport(version string, health func(context.Context) error) http.RoundTripper {
	return transport{version: version, health: health}
}

type transport struct {
	version string
	health  func(context.Context) error
}

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/healthz") {
		if err := t.health(r.Context()); err != nil {
			return answer(r, http.StatusServiceUnavailable, errorBody(computerd.Error{Code: "unavailable", Message: err.Error()})), nil
		}
		return answer(r, http.StatusOK, computerd.Health{Status: "ok", Version: t.version}), nil
	}
	return answer(r, http.StatusUnprocessableEntity, errorBody(computerd.Error{Code: CodeNotAvailable, Message: "not available on a browser session: use its CDP URL"})), nil
}

func errorBody(e computerd.Error) any { return map[string]any{"error": e} }

func answer(r *http.Request, status int, v any) *http.Response {
	raw, _ := json.Marshal(v)
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(raw)),
		ContentLength: int64(len(raw)), Request: r,
	}
}
