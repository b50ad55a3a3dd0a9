// Package browserbase is the provider whose sessions are Browserbase
// browsers kept alive for the lease: a start answers the browser's CDP
// URL and its live view, a stop releases the session. A browser session
// has no shell and no files, so the supervisor refuses exec and the file
// tools on it with a clear error.
package browserbase

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/browsersession"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id the package registers under.
const ID = "browserbase"

// The connection credentials the provider takes.
const (
	CredAPIKey    = "apiKey"
	CredProjectID = "projectId" // optional: Browserbase infers it from the key
)

// Settings the provider reads, by name.
const (
	// SettingAPIURL is Browserbase's API.
	SettingAPIURL = "BROWSERBASE_API_URL"
	// SettingRecordSessions is no longer read: a connection asks for
	// recording itself (browserRecording). A provider set to true refuses
	// to start rather than stop recording without a word.
	SettingRecordSessions = "BROWSERBASE_RECORD_SESSIONS"
)

// DefaultAPIURL is the public API.
const DefaultAPIURL = "https://api.browserbase.com"

// Headers of the machine that carry the browser's URLs.
const (
	HeaderCDPURL      = browsersession.HeaderCDPURL
	HeaderLiveViewURL = browsersession.HeaderLiveViewURL
)

// Browserbase's bounds on a session's timeout, seconds.
const (
	minTimeout = 60
	maxTimeout = 21600
)

const callTimeout = 30 * time.Second

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		if v := cfg.Get(SettingRecordSessions, ""); v != "" && v != "false" {
			return nil, fmt.Errorf("%s=%q: the setting is gone; a connection asks for recording with browserRecording (POST /v1/computers), and sessions of other connections are not recorded", SettingRecordSessions, v)
		}
		return New(Options{APIURL: cfg.Get(SettingAPIURL, DefaultAPIURL), Logger: cfg.Logger})
	})
	providers.Describe(ID, (*Browserbase)(nil))
}

// Options configure a Browserbase provider.
type Options struct {
	APIURL string
	Client *http.Client
	Logger *slog.Logger
}

// Browserbase is the provider.
type Browserbase struct {
	api *browsersession.API
}

// message reads Browserbase's error answer ({"message", "error"}).
func message(raw []byte) string {
	var e struct {
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	json.Unmarshal(raw, &e)
	return cmp.Or(e.Message, e.Error)
}

// New checks o and returns a provider.
func New(o Options) (*Browserbase, error) {
	api, err := browsersession.NewAPI(browsersession.APIOptions{
		Provider: ID, Setting: SettingAPIURL, URL: o.APIURL, DefaultURL: DefaultAPIURL, Client: o.Client, Logger: o.Logger,
		KeyName: CredAPIKey, KeyHeader: "X-BB-API-Key", Message: message,
	})
	if err != nil {
		return nil, err
	}
	return &Browserbase{api: api}, nil
}

// CheckCredentials requires an apiKey and takes an optional projectId.
func (b *Browserbase) CheckCredentials(c map[string]string) error {
	return httpapi.CheckKey(ID, c, CredAPIKey, "the key from Browserbase's settings", CredProjectID)
}

// ended reports whether a session's status is one it ends in (PENDING
// and RUNNING are not).
func ended(status string) bool {
	return status == "ERROR" || status == "TIMED_OUT" || status == "COMPLETED"
}

// session is the part of a Browserbase session Berth reads.
type session struct {
	ID           string            `json:"id"`
	Status       string            `json:"status"` // PENDING, RUNNING, ERROR, TIMED_OUT, COMPLETED
	ConnectURL   string            `json:"connectUrl"`
	ProjectID    string            `json:"projectId"`
	UserMetadata map[string]string `json:"userMetadata"`
}

type debug struct {
	DebuggerURL           string `json:"debuggerUrl"`
	DebuggerFullscreenURL string `json:"debuggerFullscreenUrl"`
	WSURL                 string `json:"wsUrl"`
}

// Create starts a kept-alive browser session tagged with Berth's labels,
// its timeout the lease, recorded only when the connection asks
// (Browserbase records by default), behind Browserbase's proxy only when
// the connection names a country, and reads its live view.
func (b *Browserbase) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	key := spec.Credentials[CredAPIKey]
	body := map[string]any{
		"keepAlive":       true,
		"timeout":         min(max(int(spec.Lease.Seconds()), minTimeout), maxTimeout),
		"userMetadata":    spec.Labels(),
		"browserSettings": map[string]any{"recordSession": spec.BrowserRecording},
	}
	if c := spec.BrowserProxyCountry; c != "" {
		body["proxies"] = []any{map[string]any{"type": "browserbase", "geolocation": map[string]any{"country": proxyCountry(c)}}}
	}
	if p := spec.Credentials[CredProjectID]; p != "" {
		body["projectId"] = p
	}
	var s session
	if err := b.api.Call(ctx, key, "POST", "/v1/sessions", body, &s); err != nil {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w", spec.ComputerID, err)
	}
	m, err := b.machine(ctx, key, s)
	if err != nil {
		// The session runs but cannot be handed over: release it, and
		// if that fails too, answer an outage so that the supervisor
		// looks for it by its label instead of taking it for never made.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer cancel()
		if rerr := b.Destroy(providers.WithCredentials(rctx, spec.Credentials), s.ID); rerr != nil {
			err = fmt.Errorf("%w: %v; releasing it failed too: %v", providers.ErrUnavailable, err, rerr)
		}
		return providers.Machine{}, fmt.Errorf("create browser %s: %w", spec.ComputerID, err)
	}
	b.api.Log.Info("browser session created", "computer", spec.ComputerID, "session", s.ID)
	return m, nil
}

// proxyCountry is a connection's country code (lowercase ISO 3166-1
// alpha-2) as Browserbase's geolocation takes it: upper case, and GB for
// uk, the code some providers use for the United Kingdom.
func proxyCountry(c string) string {
	if c == "uk" {
		c = "gb"
	}
	return strings.ToUpper(c)
}

// machine reads a running session's live view and makes its machine.
func (b *Browserbase) machine(ctx context.Context, key string, s session) (providers.Machine, error) {
	var d debug
	if err := b.api.Call(ctx, key, "GET", "/v1/sessions/"+s.ID+"/debug", nil, &d); err != nil {
		return providers.Machine{}, fmt.Errorf("session %s: live view: %w", s.ID, err)
	}
	cdp := s.ConnectURL
	if cdp == "" {
		cdp = d.WSURL
	}
	h := browsersession.Header(cdp, cmp.Or(d.DebuggerFullscreenURL, d.DebuggerURL))
	return providers.Machine{ID: s.ID, Endpoint: b.api.URL + "/v1/sessions/" + s.ID, Header: h, Labels: s.UserMetadata}, nil
}

// Destroy releases the session; one already ended counts as released.
func (b *Browserbase) Destroy(ctx context.Context, machineID string) error {
	c := providers.CredentialsFrom(ctx)
	body := map[string]any{"status": "REQUEST_RELEASE"}
	if p := c[CredProjectID]; p != "" {
		body["projectId"] = p
	}
	err := b.api.Call(ctx, c[CredAPIKey], "POST", "/v1/sessions/"+machineID, body, nil)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		var s session
		if gerr := b.api.Call(ctx, c[CredAPIKey], "GET", "/v1/sessions/"+machineID, nil, &s); gerr == nil && ended(s.Status) {
			return nil
		}
		return fmt.Errorf("release browser %s: %w", machineID, err)
	}
	b.api.Log.Info("browser session released", "session", machineID)
	return nil
}

// List returns the running sessions whose user metadata carries Berth's
// managed label.
func (b *Browserbase) List(ctx context.Context) ([]providers.Machine, error) {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	q := url.Values{"status": {"RUNNING"}, "q": {fmt.Sprintf("user_metadata['%s']:'true'", providers.LabelManaged)}}
	var ss []session
	if err := b.api.Call(ctx, key, "GET", "/v1/sessions?"+q.Encode(), nil, &ss); err != nil {
		return nil, fmt.Errorf("list browsers: %w", err)
	}
	var out []providers.Machine
	for _, s := range ss {
		if s.Status != "RUNNING" || s.UserMetadata[providers.LabelManaged] != "true" {
			continue
		}
		m, err := b.machine(ctx, key, s)
		if err != nil {
			return nil, fmt.Errorf("list browsers: %w", err)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// BrowserURLs returns the session's CDP and live-view URLs
// (supervisor.BrowserSession).
func (b *Browserbase) BrowserURLs(m providers.Machine) (cdpURL, liveViewURL string) {
	return browsersession.URLs(m)
}

// Transport answers the supervisor's computerd calls for a browser
// session: health from the session's status at Browserbase, everything
// else with CodeNotAvailable.
func (b *Browserbase) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return browsersession.Transport(ID, func(ctx context.Context) error {
		var s session
		if err := b.api.Call(ctx, credentials[CredAPIKey], "GET", "/v1/sessions/"+m.ID, nil, &s); err != nil {
			return err
		}
		if s.Status != "RUNNING" {
			return fmt.Errorf("session is %s", s.Status)
		}
		return nil
	})
}

// CodeNotAvailable is the error code a browser session's machine answers
// to anything but health.
const CodeNotAvailable = browsersession.CodeNotAvailable

// Describe implements providers.Describer.
func (*Browserbase) Describe() providers.Description {
	return providers.Description{
		Summary: "a Browserbase browser session kept alive for the lease; a start answers its CDP and live-view URLs; no shell or files",
		Settings: []providers.Setting{
			{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "Browserbase's API"},
		},
		Credentials: []providers.Setting{
			{Name: CredAPIKey, Required: true, Secret: true, Help: "a Browserbase API key"},
			{Name: CredProjectID, Help: "the Browserbase project; unset: the key's own"},
		},
	}
}

var (
	_ providers.Provider          = (*Browserbase)(nil)
	_ providers.Lister            = (*Browserbase)(nil)
	_ providers.Transporter       = (*Browserbase)(nil)
	_ providers.CredentialChecker = (*Browserbase)(nil)
	_ providers.Describer         = (*Browserbase)(nil)
)
