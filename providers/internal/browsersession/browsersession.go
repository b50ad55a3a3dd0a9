// Package browsersession is what the hosted browser providers
// (browserbase, browseruse) share: the machine headers that carry a
// browser's CDP and live-view URLs, and the transport that answers the
// supervisor's computerd calls for a session that has no computerd.
package browsersession

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/berthdev/berth/images/computerd"
	"github.com/berthdev/berth/providers"
)

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
