// Package browseruse is the provider whose sessions are Browser Use cloud
// browsers: a start answers the browser's CDP URL and its live view, a
// stop stops the browser. A browser session has no shell and no files, so
// the supervisor refuses exec and the file tools on it with a clear error.
// Browser Use keeps no metadata on a browser, so the provider cannot tag
// one: a start whose reply was lost leaves the session uncertain, and the
// browser ends at its own timeout (the lease).
package browseruse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/browsersession"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id the package registers under.
const ID = "browseruse"

// CredAPIKey is the connection's Browser Use API key.
const CredAPIKey = "apiKey"

// Settings the provider reads, by name.
const (
	// SettingAPIURL is Browser Use's cloud API.
	SettingAPIURL = "BROWSERUSE_API_URL"
	// SettingProxyCountry is no longer read: a connection names its proxy
	// country itself (browserProxyCountry). A provider with it set refuses
	// to start rather than drop the proxy without a word.
	SettingProxyCountry = "BROWSERUSE_PROXY_COUNTRY"
)

// DefaultAPIURL is the public API.
const DefaultAPIURL = "https://api.browser-use.com/api/v3"

// Headers of the machine that carry the browser's URLs.
const (
	HeaderCDPURL      = browsersession.HeaderCDPURL
	HeaderLiveViewURL = browsersession.HeaderLiveViewURL
)

// maxTimeoutMinutes is the longest browser Browser Use runs (paid plans).
const maxTimeoutMinutes = 240

// CodeNotAvailable is the error code a browser session's machine answers
// to anything but health.
const CodeNotAvailable = browsersession.CodeNotAvailable

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		if v := cfg.Get(SettingProxyCountry, ""); v != "" {
			return nil, fmt.Errorf("%s=%q: the setting is gone; a connection names its proxy country with browserProxyCountry (POST /v1/computers), and browsers of other connections use no proxy", SettingProxyCountry, v)
		}
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
	api *browsersession.API
}

// detail reads Browser Use's error answer: {"detail": "..."}, or a
// validation failure's {"detail": [{"loc": [...], "msg": "..."}]}.
func detail(raw []byte) string {
	var e struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Detail == nil {
		return ""
	}
	var msg string
	if json.Unmarshal(e.Detail, &msg) == nil {
		return msg
	}
	var list []struct {
		Loc []any  `json:"loc"`
		Msg string `json:"msg"`
	}
	if json.Unmarshal(e.Detail, &list) == nil {
		var parts []string
		for _, v := range list {
			loc := make([]string, len(v.Loc))
			for i, l := range v.Loc {
				loc[i] = fmt.Sprint(l)
			}
			parts = append(parts, strings.Join(loc, ".")+": "+v.Msg)
		}
		return strings.Join(parts, "; ")
	}
	return string(e.Detail)
}

// refused picks Browser Use's 403 for a timeout over its limit: a refusal
// of the request, not of the key.
func refused(status int, raw []byte) bool {
	return status == http.StatusForbidden && strings.Contains(strings.ToLower(detail(raw)), "timeout")
}

// proxyCountry is a connection's country code (lowercase ISO 3166-1
// alpha-2) as Browser Use's ProxyCountryCode takes it: the same, but uk
// for the United Kingdom, whose ISO code gb Browser Use does not list.
func proxyCountry(c string) string {
	if c == "gb" {
		return "uk"
	}
	return c
}

// New checks o and returns a provider.
func New(o Options) (*BrowserUse, error) {
	api, err := browsersession.NewAPI(browsersession.APIOptions{
		Provider: ID, Setting: SettingAPIURL, URL: o.APIURL, DefaultURL: DefaultAPIURL, Client: o.Client, Logger: o.Logger,
		KeyName: CredAPIKey, KeyHeader: "X-Browser-Use-API-Key", Message: detail, Refused: refused,
	})
	if err != nil {
		return nil, err
	}
	return &BrowserUse{api: api}, nil
}

// CheckCredentials requires an apiKey and nothing else.
func (b *BrowserUse) CheckCredentials(c map[string]string) error {
	return httpapi.CheckKey(ID, c, CredAPIKey, "a Browser Use key (bu_...)")
}

// browser is the part of a Browser Use browser session Berth reads.
type browser struct {
	ID      string `json:"id"`
	Status  string `json:"status"` // active, stopped
	CDPURL  string `json:"cdpUrl"`
	LiveURL string `json:"liveUrl"`
}

// Create starts a cloud browser whose own timeout is the lease, with no
// proxy unless the connection names a country (Browser Use would
// otherwise route it through a US proxy), recorded only when the
// connection asks.
func (b *BrowserUse) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	minutes := min(max(int(math.Ceil(spec.Lease.Minutes())), 1), maxTimeoutMinutes)
	body := map[string]any{"timeout": minutes, "proxyCountryCode": nil, "enableRecording": spec.BrowserRecording}
	if c := spec.BrowserProxyCountry; c != "" {
		body["proxyCountryCode"] = proxyCountry(c)
	}
	var br browser
	if err := b.api.Call(ctx, spec.Credentials[CredAPIKey], "POST", "/browsers", body, &br); err != nil {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w", spec.ComputerID, err)
	}
	if br.ID == "" || br.CDPURL == "" {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w: the answer has no id or cdpUrl", spec.ComputerID, providers.ErrUnavailable)
	}
	h := browsersession.Header(br.CDPURL, br.LiveURL)
	b.api.Log.Info("browser session created", "computer", spec.ComputerID, "browser", br.ID)
	return providers.Machine{ID: br.ID, Endpoint: b.api.URL + "/browsers/" + br.ID, Header: h, Labels: spec.Labels()}, nil
}

// Destroy stops the browser; one already stopped or gone counts as done.
func (b *BrowserUse) Destroy(ctx context.Context, machineID string) error {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	err := b.api.Call(ctx, key, "PATCH", "/browsers/"+machineID, map[string]any{"action": "stop"}, nil)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		var br browser
		if gerr := b.api.Call(ctx, key, "GET", "/browsers/"+machineID, nil, &br); gerr == nil && br.Status == "stopped" {
			return nil
		}
		return fmt.Errorf("stop browser %s: %w", machineID, err)
	}
	b.api.Log.Info("browser session stopped", "browser", machineID)
	return nil
}

// BrowserURLs returns the browser's CDP and live-view URLs
// (supervisor.BrowserSession).
func (b *BrowserUse) BrowserURLs(m providers.Machine) (cdpURL, liveViewURL string) {
	return browsersession.URLs(m)
}

// Transport answers the supervisor's computerd calls for a browser
// session: health from the browser's status, everything else with
// CodeNotAvailable.
func (b *BrowserUse) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return browsersession.Transport(ID, func(ctx context.Context) error {
		var br browser
		if err := b.api.Call(ctx, credentials[CredAPIKey], "GET", "/browsers/"+m.ID, nil, &br); err != nil {
			return err
		}
		if br.Status != "active" {
			return fmt.Errorf("browser is %s", br.Status)
		}
		return nil
	})
}

// Describe implements providers.Describer.
func (*BrowserUse) Describe() providers.Description {
	return providers.Description{
		Summary: "a Browser Use cloud browser; a start answers its CDP and live-view URLs; no shell or files",
		Settings: []providers.Setting{
			{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "Browser Use's cloud API"},
		},
		Credentials: []providers.Setting{{Name: CredAPIKey, Required: true, Secret: true, Help: "a Browser Use API key"}},
	}
}

var (
	_ providers.Provider          = (*BrowserUse)(nil)
	_ providers.Transporter       = (*BrowserUse)(nil)
	_ providers.CredentialChecker = (*BrowserUse)(nil)
	_ providers.Describer         = (*BrowserUse)(nil)
)
