// Package browserbase is the provider whose sessions are Browserbase
// browsers kept alive for the lease: a start answers the browser's CDP
// URL and its live view, a stop releases the session. A browser session
// has no shell and no files, so the supervisor refuses exec and the file
// tools on it with a clear error.
package browserbase

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/berthdev/berth/images/computerd"
	"github.com/berthdev/berth/providers"
)

// ID is the provider id the package registers under.
const ID = "browserbase"

// The connection credentials the provider takes.
const (
	CredAPIKey    = "apiKey"
	CredProjectID = "projectId" // optional: Browserbase infers it from the key
)

// SettingAPIURL is Browserbase's API.
const SettingAPIURL = "BROWSERBASE_API_URL"

// DefaultAPIURL is the public API.
const DefaultAPIURL = "https://api.browserbase.com"

// Headers of the machine that carry the browser's URLs.
const (
	HeaderCDPURL      = "X-Berth-Browser-Cdp-Url"
	HeaderLiveViewURL = "X-Berth-Browser-Live-View-Url"
)

// Browserbase's bounds on a session's timeout, seconds.
const (
	minTimeout = 60
	maxTimeout = 21600
)

const callTimeout = 30 * time.Second

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
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
	api string
	hc  *http.Client
	log *slog.Logger
}

// New checks o and returns a provider.
func New(o Options) (*Browserbase, error) {
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if u, err := url.Parse(o.APIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%s=%q: want https://HOST, such as %s", SettingAPIURL, o.APIURL, DefaultAPIURL)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Browserbase{api: strings.TrimRight(o.APIURL, "/"), hc: o.Client, log: o.Logger.With("component", "browserbase")}
	if b.hc == nil {
		b.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	return b, nil
}

// CheckCredentials requires an apiKey and takes an optional projectId.
func (b *Browserbase) CheckCredentials(c map[string]string) error {
	for k := range c {
		if k != CredAPIKey && k != CredProjectID {
			return fmt.Errorf("%q is not a browserbase credential: want %q and optional %q", k, CredAPIKey, CredProjectID)
		}
	}
	if k := c[CredAPIKey]; strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t\r\n") {
		return fmt.Errorf("%s is missing or has white space: want the key from Browserbase's settings", CredAPIKey)
	}
	return nil
}

// session is the part of a Browserbase session Berth reads.
type session struct {
	ID           string            `json:"id"`
	Status       string            `json:"status"` // RUNNING, ERROR, TIMED_OUT, COMPLETED
	ConnectURL   string            `json:"connectUrl"`
	ProjectID    string            `json:"projectId"`
	UserMetadata map[string]string `json:"userMetadata"`
}

type debug struct {
	DebuggerURL           string `json:"debuggerUrl"`
	DebuggerFullscreenURL string `json:"debuggerFullscreenUrl"`
	WSURL                 string `json:"wsUrl"`
}

// call sends one API call with key; out receives a 2xx answer.
func (b *Browserbase) call(ctx context.Context, key, method, path string, body, out any) error {
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
	req.Header.Set("X-BB-API-Key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	p, _, _ := strings.Cut(path, "?")
	resp, err := b.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%w: %s %s: %v", providers.ErrUnavailable, method, p, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		json.Unmarshal(raw, &e)
		msg := strings.ReplaceAll(fmt.Sprintf("%s %s: %d %s", method, p, resp.StatusCode, e.Message+e.Error), key, "[redacted]")
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
			return fmt.Errorf("%w: %s %s: unreadable answer", providers.ErrUnavailable, method, p)
		}
	}
	return nil
}

// Create starts a kept-alive browser session tagged with Berth's labels,
// its timeout the lease, and reads its live view.
func (b *Browserbase) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	key := spec.Credentials[CredAPIKey]
	body := map[string]any{
		"keepAlive":    true,
		"timeout":      min(max(int(spec.Lease.Seconds()), minTimeout), maxTimeout),
		"userMetadata": spec.Labels(),
	}
	if p := spec.Credentials[CredProjectID]; p != "" {
		body["projectId"] = p
	}
	var s session
	if err := b.call(ctx, key, "POST", "/v1/sessions", body, &s); err != nil {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w", spec.ComputerID, err)
	}
	m, err := b.machine(ctx, key, s)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create browser %s: %w", spec.ComputerID, err)
	}
	b.log.Info("browser session created", "computer", spec.ComputerID, "session", s.ID)
	return m, nil
}

// machine reads a running session's live view and makes its machine.
func (b *Browserbase) machine(ctx context.Context, key string, s session) (providers.Machine, error) {
	var d debug
	if err := b.call(ctx, key, "GET", "/v1/sessions/"+s.ID+"/debug", nil, &d); err != nil {
		return providers.Machine{}, fmt.Errorf("session %s: live view: %w", s.ID, err)
	}
	cdp := s.ConnectURL
	if cdp == "" {
		cdp = d.WSURL
	}
	h := http.Header{}
	h.Set(HeaderCDPURL, cdp)
	h.Set(HeaderLiveViewURL, cmpOr(d.DebuggerFullscreenURL, d.DebuggerURL))
	return providers.Machine{ID: s.ID, Endpoint: b.api + "/v1/sessions/" + s.ID, Header: h, Labels: s.UserMetadata}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Destroy releases the session; one already ended counts as released.
func (b *Browserbase) Destroy(ctx context.Context, machineID string) error {
	c := providers.CredentialsFrom(ctx)
	body := map[string]any{"status": "REQUEST_RELEASE"}
	if p := c[CredProjectID]; p != "" {
		body["projectId"] = p
	}
	err := b.call(ctx, c[CredAPIKey], "POST", "/v1/sessions/"+machineID, body, nil)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		var s session
		if gerr := b.call(ctx, c[CredAPIKey], "GET", "/v1/sessions/"+machineID, nil, &s); gerr == nil && s.Status != "RUNNING" {
			return nil
		}
		return fmt.Errorf("release browser %s: %w", machineID, err)
	}
	b.log.Info("browser session released", "session", machineID)
	return nil
}

// List returns the running sessions whose user metadata carries Berth's
// managed label.
func (b *Browserbase) List(ctx context.Context) ([]providers.Machine, error) {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	q := url.Values{"status": {"RUNNING"}, "q": {fmt.Sprintf("user_metadata['%s']:'true'", providers.LabelManaged)}}
	var ss []session
	if err := b.call(ctx, key, "GET", "/v1/sessions?"+q.Encode(), nil, &ss); err != nil {
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
	return m.Header.Get(HeaderCDPURL), m.Header.Get(HeaderLiveViewURL)
}

// Transport answers the supervisor's computerd calls for a browser
// session: health from the session's status at Browserbase, everything
// else with CodeNotAvailable.
func (b *Browserbase) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return browserTransport{health: func(ctx context.Context) error {
		var s session
		if err := b.call(ctx, credentials[CredAPIKey], "GET", "/v1/sessions/"+m.ID, nil, &s); err != nil {
			return err
		}
		if s.Status != "RUNNING" {
			return fmt.Errorf("session is %s", s.Status)
		}
		return nil
	}}
}

// CodeNotAvailable is the error code a browser session's machine answers
// to anything but health.
const CodeNotAvailable = "not_available_on_browser_session"

type browserTransport struct{ health func(context.Context) error }

func (t browserTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/healthz") {
		if err := t.health(r.Context()); err != nil {
			return answer(r, http.StatusServiceUnavailable, computerd.Error{Code: "unavailable", Message: err.Error()}), nil
		}
		return answer(r, http.StatusOK, computerd.Health{Status: "ok", Version: ID}), nil
	}
	return answer(r, http.StatusUnprocessableEntity, computerd.Error{Code: CodeNotAvailable, Message: "not available on a browser session: use its CDP URL"}), nil
}

func answer(r *http.Request, status int, v any) *http.Response {
	var raw []byte
	if e, ok := v.(computerd.Error); ok {
		raw, _ = json.Marshal(map[string]any{"error": e})
	} else {
		raw, _ = json.Marshal(v)
	}
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(raw)),
		ContentLength: int64(len(raw)), Request: r,
	}
}

// Describe implements providers.Describer.
func (*Browserbase) Describe() providers.Description {
	return providers.Description{
		Summary:  "a Browserbase browser session kept alive for the lease; a start answers its CDP and live-view URLs; no shell or files",
		Settings: []providers.Setting{{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "Browserbase's API"}},
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
