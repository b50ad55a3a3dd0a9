// Package browseruse is the provider whose sessions are Browser Use cloud
// browsers: a start answers the browser's CDP URL and its live view, a
// stop stops the browser. A browser session has no shell and no files, so
// the supervisor refuses exec and the file tools on it with a clear error.
// Browser Use keeps no metadata on a browser, so the provider cannot tag
// one: a start whose reply was lost leaves the session uncertain, and the
// browser ends at its own timeout (the lease).
package browseruse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/berthdev/berth/images/computerd"
	"github.com/berthdev/berth/providers"
)

// ID is the provider id the package registers under.
const ID = "browseruse"

// CredAPIKey is the connection's Browser Use API key.
const CredAPIKey = "apiKey"

// SettingAPIURL is Browser Use's cloud API.
const SettingAPIURL = "BROWSERUSE_API_URL"

// DefaultAPIURL is the public API.
const DefaultAPIURL = "https://api.browser-use.com/api/v3"

// Headers of the machine that carry the browser's URLs.
const (
	HeaderCDPURL      = "X-Berth-Browser-Cdp-Url"
	HeaderLiveViewURL = "X-Berth-Browser-Live-View-Url"
)

// maxTimeoutMinutes is the longest browser Browser Use runs (paid plans).
const maxTimeoutMinutes = 240

// CodeNotAvailable is the error code a browser session's machine answers
// to anything but health.
const CodeNotAvailable = "not_available_on_browser_session"

const callTimeout = 30 * time.Second

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{APIURL: cfg.Get(SettingAPIURL, DefaultAPIURL), Logger: cfg.Logger})
	})
	providers.Describe(ID, (*BrowserUse)(nil))
}

// Options configure a Browser Use provider.
type Options struct {
	APIURL string
	Client *http.Client
	Logger *slog.Logger
}

// BrowserUse is the provider.
type BrowserUse struct {
	api string
	hc  *http.Client
	log *slog.Logger
}

// New checks o and returns a provider.
func New(o Options) (*BrowserUse, error) {
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if u, err := url.Parse(o.APIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%s=%q: want https://HOST/PATH, such as %s", SettingAPIURL, o.APIURL, DefaultAPIURL)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	b := &BrowserUse{api: strings.TrimRight(o.APIURL, "/"), hc: o.Client, log: o.Logger.With("component", "browseruse")}
	if b.hc == nil {
		b.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	return b, nil
}

// CheckCredentials requires an apiKey and nothing else.
func (b *BrowserUse) CheckCredentials(c map[string]string) error {
	for k := range c {
		if k != CredAPIKey {
			return fmt.Errorf("%q is not a browseruse credential: want %q", k, CredAPIKey)
		}
	}
	if k := c[CredAPIKey]; strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t\r\n") {
		return fmt.Errorf("%s is missing or has white space: want a Browser Use key (bu_...)", CredAPIKey)
	}
	return nil
}

// browser is the part of a Browser Use browser session Berth reads.
type browser struct {
	ID      string `json:"id"`
	Status  string `json:"status"` // active, stopped
	CDPURL  string `json:"cdpUrl"`
	LiveURL string `json:"liveUrl"`
}

func (b *BrowserUse) call(ctx context.Context, key, method, path string, body, out any) error {
	if key == "" {
		return fmt.Errorf("%w: no %s in the connection's credentials", providers.ErrBadCredentials, CredAPIKey)
	}
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.api+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Browser-Use-API-Key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%w: %s %s: %v", providers.ErrUnavailable, method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Detail any `json:"detail"`
		}
		json.Unmarshal(raw, &e)
		msg := strings.ReplaceAll(fmt.Sprintf("%s %s: %d %v", method, path, resp.StatusCode, e.Detail), key, "[redacted]")
		switch {
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: %s", providers.ErrBadCredentials, msg)
		case resp.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%w: %s", providers.ErrNotFound, msg)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusPaymentRequired:
			return fmt.Errorf("%w: %s", providers.ErrCapacity, msg)
		}
		return fmt.Errorf("%w: %s", providers.ErrUnavailable, msg)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%w: %s %s: unreadable answer", providers.ErrUnavailable, method, path)
		}
	}
	return nil
}

// Create starts a cloud browser whose own timeout is the lease.
func (b *BrowserUse) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	minutes := min(max(int(math.Ceil(spec.Lease.Minutes())), 1), maxTimeoutMinutes)
	var br browser
	if err := b.call(ctx, spec.Credentials[CredAPIKey], "POST", "/browsers", map[string]any{"timeout": minutes}, &br); err != nil {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w", spec.ComputerID, err)
	}
	if br.ID == "" || br.CDPURL == "" {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w: the answer has no id or cdpUrl", spec.ComputerID, providers.ErrUnavailable)
	}
	h := http.Header{}
	h.Set(HeaderCDPURL, br.CDPURL)
	h.Set(HeaderLiveViewURL, br.LiveURL)
	b.log.Info("browser session created", "computer", spec.ComputerID, "browser", br.ID)
	return providers.Machine{ID: br.ID, Endpoint: b.api + "/browsers/" + br.ID, Header: h, Labels: spec.Labels()}, nil
}

// Destroy stops the browser; one already stopped or gone counts as done.
func (b *BrowserUse) Destroy(ctx context.Context, machineID string) error {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	err := b.call(ctx, key, "PATCH", "/browsers/"+machineID, map[string]any{"action": "stop"}, nil)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		var br browser
		if gerr := b.call(ctx, key, "GET", "/browsers/"+machineID, nil, &br); gerr == nil && br.Status == "stopped" {
			return nil
		}
		return fmt.Errorf("stop browser %s: %w", machineID, err)
	}
	b.log.Info("browser session stopped", "browser", machineID)
	return nil
}

// BrowserURLs returns the browser's CDP and live-view URLs
// (supervisor.BrowserSession).
func (b *BrowserUse) BrowserURLs(m providers.Machine) (cdpURL, liveViewURL string) {
	return m.Header.Get(HeaderCDPURL), m.Header.Get(HeaderLiveViewURL)
}

// Transport answers the supervisor's computerd calls for a browser
// session: health from the browser's status, everything else with
// CodeNotAvailable.
func (b *BrowserUse) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return browserTransport{health: func(ctx context.Context) error {
		var br browser
		if err := b.call(ctx, credentials[CredAPIKey], "GET", "/browsers/"+m.ID, nil, &br); err != nil {
			return err
		}
		if br.Status != "active" {
			return fmt.Errorf("browser is %s", br.Status)
		}
		return nil
	}}
}

type browserTransport struct{ health func(context.Context) error }

func (t browserTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/healthz") {
		if err := t.health(r.Context()); err != nil {
			return answer(r, http.StatusServiceUnavailable, map[string]any{"error": computerd.Error{Code: "unavailable", Message: err.Error()}}), nil
		}
		return answer(r, http.StatusOK, computerd.Health{Status: "ok", Version: ID}), nil
	}
	return answer(r, http.StatusUnprocessableEntity, map[string]any{"error": computerd.Error{Code: CodeNotAvailable, Message: "not available on a browser session: use its CDP URL"}}), nil
}

func answer(r *http.Request, status int, v any) *http.Response {
	raw, _ := json.Marshal(v)
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(raw)),
		ContentLength: int64(len(raw)), Request: r,
	}
}

// Describe implements providers.Describer.
func (*BrowserUse) Describe() providers.Description {
	return providers.Description{
		Summary:     "a Browser Use cloud browser; a start answers its CDP and live-view URLs; no shell or files",
		Settings:    []providers.Setting{{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "Browser Use's cloud API"}},
		Credentials: []providers.Setting{{Name: CredAPIKey, Required: true, Secret: true, Help: "a Browser Use API key"}},
	}
}

var (
	_ providers.Provider          = (*BrowserUse)(nil)
	_ providers.Transporter       = (*BrowserUse)(nil)
	_ providers.CredentialChecker = (*BrowserUse)(nil)
	_ providers.Describer         = (*BrowserUse)(nil)
)
