// Package e2b runs Berth computers as E2B sandboxes, and serves every
// provider with an E2B-compatible API (Novita registers through it, see
// providers/novita). A sandbox starts from a template built from Berth's
// headless or desktop image, whose start command runs computerd; the
// supervisor reaches computerd through the sandbox's port URL
// (https://7070-<sandboxID>.<domain>) with the sandbox's traffic access
// token. Sandboxes carry Berth's labels as metadata, are listed by it, and
// get the lease as their E2B timeout, so that E2B ends them if the
// supervisor cannot.
//
// The API is E2B's REST API (https://e2b.dev/docs/api-reference, the
// OpenAPI file spec/openapi.yml of github.com/e2b-dev/E2B): POST
// /sandboxes, GET /v2/sandboxes, DELETE /sandboxes/{sandboxID} and POST
// /sandboxes/{sandboxID}/connect, authenticated with X-API-Key. A create
// sends what E2B's own SDKs send (secure and allow_internet_access), since
// the API refuses port URLs closed to the public without secure; the fake
// (e2bfake) holds every call to the document and to those server rules.
package e2b

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/hosted"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id of E2B itself.
const ID = "e2b"

// CredAPIKey is the one credential a connection gives: the account's API key.
const CredAPIKey = "apiKey"

// TrafficTokenHeader carries a sandbox's traffic access token on requests
// to its port URLs.
const TrafficTokenHeader = "e2b-traffic-access-token"

// Grace is added to the lease for the E2B timeout: the supervisor stops a
// computer at its lease, and E2B ends it shortly after if the supervisor
// could not.
const Grace = time.Minute

// maxListPages bounds one List.
const maxListPages = 100

// Settings are the names an E2B-compatible provider reads its settings
// from, with their defaults.
type Settings struct {
	APIURL, Domain, HeadlessTemplate, DesktopTemplate string // setting names
	DefaultAPIURL, DefaultDomain                      string
	DefaultHeadless, DefaultDesktop                   string
}

// E2BSettings are E2B's own.
var E2BSettings = Settings{
	APIURL: "E2B_API_URL", Domain: "E2B_DOMAIN",
	HeadlessTemplate: "E2B_TEMPLATE_HEADLESS", DesktopTemplate: "E2B_TEMPLATE_DESKTOP",
	DefaultAPIURL: "https://api.e2b.app", DefaultDomain: "e2b.app",
	DefaultHeadless: "berth-headless", DefaultDesktop: "berth-desktop",
}

func init() {
	Register(ID, "E2B sandboxes from a template built from the headless or desktop image", E2BSettings)
}

// Register registers an E2B-compatible provider under id, configured from
// the settings s names.
func Register(id, summary string, s Settings) {
	providers.Register(id, func(cfg providers.Config) (providers.Provider, error) {
		o := OptionsFromConfig(id, s, cfg)
		if _, err := hosted.APIURL(s.APIURL, o.APIURL); err != nil {
			return nil, err
		}
		return New(o)
	})
	providers.Describe(id, describer{summary: summary, s: s})
}

// OptionsFromConfig reads the settings s names.
func OptionsFromConfig(id string, s Settings, cfg providers.Config) Options {
	return Options{
		Name:             id,
		APIURL:           cfg.Get(s.APIURL, s.DefaultAPIURL),
		Domain:           cfg.Get(s.Domain, s.DefaultDomain),
		HeadlessTemplate: cfg.Get(s.HeadlessTemplate, s.DefaultHeadless),
		DesktopTemplate:  cfg.Get(s.DesktopTemplate, s.DefaultDesktop),
		Logger:           cfg.Logger,
	}
}

// describer describes an E2B-compatible provider by its settings.
type describer struct {
	summary string
	s       Settings
}

// Describe implements providers.Describer.
func (d describer) Describe() providers.Description {
	return providers.Description{
		Summary: d.summary,
		Settings: []providers.Setting{
			{Name: d.s.APIURL, Default: d.s.DefaultAPIURL, Help: "the API's base URL"},
			{Name: d.s.Domain, Default: d.s.DefaultDomain, Help: "the domain of sandbox port URLs, when the API does not say"},
			{Name: d.s.HeadlessTemplate, Default: d.s.DefaultHeadless, Help: "template built from the headless image"},
			{Name: d.s.DesktopTemplate, Default: d.s.DefaultDesktop, Help: "template built from the desktop image"},
		},
		Credentials: []providers.Setting{{Name: CredAPIKey, Required: true, Secret: true, Help: "the account's API key"}},
	}
}

// Options configure a provider.
type Options struct {
	// Name is the provider's id, used in messages (default "e2b").
	Name string
	// APIURL is the API's base URL.
	APIURL string
	// Domain is the sandbox domain, used when the API answers none.
	Domain string
	// HeadlessTemplate and DesktopTemplate are the template ids or aliases
	// computers start from.
	HeadlessTemplate, DesktopTemplate string
	// Scheme of the sandbox port URLs (default https).
	Scheme string
	// Transport carries the API calls and the traffic to sandboxes (default
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Logger receives the provider's logs; nil discards them.
	Logger *slog.Logger
}

// Provider is an E2B-compatible provider.
type Provider struct {
	o      Options
	api    *httpapi.Client
	create *httpapi.Client // api, reading a create's answers (createFailure)
	creds  hosted.Credentials
	log    *slog.Logger

	mu     sync.Mutex
	tokens map[string]string // traffic tokens by sandbox id, for machines found by List
}

// New returns a provider. It does not call the API: the first start proves
// the connection's key.
func New(o Options) (*Provider, error) {
	if o.Name == "" {
		o.Name = ID
	}
	if o.Scheme == "" {
		o.Scheme = "https"
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var err error
	if o.APIURL, err = hosted.APIURL(o.Name+" API URL", o.APIURL); err != nil {
		return nil, err
	}
	if o.HeadlessTemplate == "" || o.DesktopTemplate == "" {
		return nil, fmt.Errorf("%s: the headless and desktop template names are required", o.Name)
	}
	api := &httpapi.Client{
		BaseURL: o.APIURL, HTTP: &http.Client{Transport: o.Transport}, Timeout: 2 * time.Minute, KeyName: CredAPIKey,
		Auth:    func(h http.Header, key string) { h.Set("X-API-Key", key) },
		Failure: failure,
	}
	create := *api
	create.Failure = createFailure
	return &Provider{o: o, log: o.Logger.With("component", o.Name), tokens: map[string]string{},
		api: api, create: &create,
		creds: hosted.Credentials{Provider: o.Name, List: []hosted.Credential{
			{Name: CredAPIKey, Want: "the " + o.Name + " account's API key"}}},
	}, nil
}

// CheckCredentials requires a non-empty apiKey and nothing else.
func (p *Provider) CheckCredentials(c map[string]string) error { return p.creds.Check(c) }

// newSandbox is the body of POST /sandboxes (NewSandbox). Secure and
// AllowInternetAccess are always sent, as E2B's SDKs send them; the API
// refuses network.allowPublicTraffic false unless secure is true.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             int               `json:"timeout"`
	AutoPause           bool              `json:"autoPause"`
	Secure              bool              `json:"secure"`
	AllowInternetAccess bool              `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             *network          `json:"network,omitempty"`
}

type network struct {
	AllowPublicTraffic bool `json:"allowPublicTraffic"`
}

// sandbox is the answer of POST /sandboxes and of connect.
type sandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is one entry of GET /v2/sandboxes.
type listedSandbox struct {
	SandboxID string            `json:"sandboxID"`
	State     string            `json:"state"`
	Metadata  map[string]string `json:"metadata"`
}

func (p *Provider) template(kind string) string {
	if kind == providers.ImageDesktop {
		return p.o.DesktopTemplate
	}
	return p.o.HeadlessTemplate
}

// Create creates a sandbox from the template of spec.Image with Berth's
// labels as metadata, the computer's environment and token hash as its
// variables, the lease (plus Grace) as its timeout, secure envd access, and
// its port URLs closed to requests without the traffic token. A template
// the API does not know is providers.ErrBadImage; a request it refuses
// (400: a timeout above the account's limit, a template reference that is
// not valid) a *providers.RefusedError with the API's message.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	req := newSandbox{
		TemplateID:          p.template(spec.Image),
		Timeout:             int(hosted.Timeout(spec, Grace) / time.Second),
		Secure:              true,
		AllowInternetAccess: true,
		Metadata:            spec.Labels(),
		EnvVars:             hosted.Env(spec),
		Network:             &network{AllowPublicTraffic: false},
	}
	var sb sandbox
	if _, err := p.call(ctx, p.create, spec.Credentials[CredAPIKey], http.MethodPost, "/sandboxes", req, &sb); err != nil {
		if errors.Is(err, providers.ErrBadImage) {
			return providers.Machine{}, fmt.Errorf("create computer %s: template %q: %w", spec.ComputerID, req.TemplateID, err)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	if sb.SandboxID == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: the answer names no sandbox", spec.ComputerID, providers.ErrUnavailable)
	}
	m := p.machine(sb.SandboxID, sb.Domain, spec.Labels())
	if sb.TrafficAccessToken != nil && *sb.TrafficAccessToken != "" {
		m.Header = http.Header{http.CanonicalHeaderKey(TrafficTokenHeader): {*sb.TrafficAccessToken}}
	}
	p.log.Info("sandbox created", "computer", spec.ComputerID, "sandbox", sb.SandboxID, "template", req.TemplateID, "timeout", req.Timeout)
	return m, nil
}

func (p *Provider) machine(id string, domain *string, labels map[string]string) providers.Machine {
	d := p.o.Domain
	if domain != nil && *domain != "" {
		d = *domain
	}
	return providers.Machine{
		ID:       id,
		Endpoint: fmt.Sprintf("%s://%d-%s.%s", p.o.Scheme, computerd.Port, id, d),
		Labels:   labels,
	}
}

// Destroy kills the sandbox (DELETE /sandboxes/{id}); one already gone is
// done. The key comes from the context (providers.WithCredentials).
func (p *Provider) Destroy(ctx context.Context, machineID string) error {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	if code, err := p.call(ctx, p.api, key, http.MethodDelete, "/sandboxes/"+url.PathEscape(machineID), nil, nil); err != nil && code != http.StatusNotFound {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	p.mu.Lock()
	delete(p.tokens, machineID)
	p.mu.Unlock()
	p.log.Info("sandbox killed", "sandbox", machineID)
	return nil
}

// List returns the running and paused sandboxes of the account in the
// context that carry Berth's managed label. Without credentials in the
// context there is no account to list, and it answers nothing.
func (p *Provider) List(ctx context.Context) ([]providers.Machine, error) {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	if key == "" {
		return nil, nil
	}
	q := url.Values{
		"metadata": {url.QueryEscape(providers.LabelManaged) + "=" + url.QueryEscape("true")},
		"state":    {"running,paused"},
		"limit":    {"100"},
	}
	var out []providers.Machine
	for page := 0; page < maxListPages; page++ {
		var items []listedSandbox
		reply := http.Header{}
		if _, err := p.api.Do(ctx, key, httpapi.Call{Method: http.MethodGet, Path: "/v2/sandboxes?" + q.Encode(), Reply: reply}, &items); err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, s := range items {
			if s.Metadata[providers.LabelManaged] != "true" {
				continue
			}
			out = append(out, p.machine(s.SandboxID, nil, s.Metadata))
		}
		next := reply.Get("X-Next-Token")
		if next == "" {
			return out, nil
		}
		q.Set("nextToken", next)
	}
	return nil, fmt.Errorf("list sandboxes: %w: more than %d pages", providers.ErrUnavailable, maxListPages)
}

// Transport returns a RoundTripper that adds m's traffic token when the
// request lacks one: a machine found by List (after a lost create reply)
// has no token recorded, so it is fetched once with connect.
func (p *Provider) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return &trafficTransport{p: p, id: m.ID, key: credentials[CredAPIKey]}
}

type trafficTransport struct {
	p   *Provider
	id  string
	key string
}

func (t *trafficTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get(TrafficTokenHeader) != "" || t.key == "" {
		return t.p.o.Transport.RoundTrip(r)
	}
	tok, err := t.p.trafficToken(r.Context(), t.id, t.key)
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	if tok != "" {
		r2.Header.Set(TrafficTokenHeader, tok)
	}
	return t.p.o.Transport.RoundTrip(r2)
}

// trafficToken returns the traffic token of sandbox id, asking the API
// (POST /sandboxes/{id}/connect with timeout 0, which never shortens it)
// the first time.
func (p *Provider) trafficToken(ctx context.Context, id, key string) (string, error) {
	p.mu.Lock()
	tok, ok := p.tokens[id]
	p.mu.Unlock()
	if ok {
		return tok, nil
	}
	var sb sandbox
	if _, err := p.call(ctx, p.api, key, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/connect", map[string]int{"timeout": 0}, &sb); err != nil {
		return "", fmt.Errorf("traffic token of sandbox %s: %w", id, err)
	}
	if sb.TrafficAccessToken != nil {
		tok = *sb.TrafficAccessToken
	}
	p.mu.Lock()
	p.tokens[id] = tok
	p.mu.Unlock()
	return tok, nil
}

// call sends one API call with key through cl; an answer of 429 says when
// to try again, as E2B's Retry-After does.
func (p *Provider) call(ctx context.Context, cl *httpapi.Client, key, method, path string, body, out any) (int, error) {
	reply := http.Header{}
	code, err := cl.Do(ctx, key, httpapi.Call{Method: method, Path: path, Body: body, Reply: reply}, out)
	if code == http.StatusTooManyRequests {
		if s, perr := strconv.Atoi(reply.Get("Retry-After")); perr == nil {
			err = fmt.Errorf("%w (retry after %d s)", err, s)
		}
	}
	return code, err
}

// failure reads E2B's error answer, {"code", "message"}; the status says
// what it means.
func failure(_ int, raw []byte) (string, error) { return hosted.Message(raw), nil }

// createFailure reads the answer to a create. A 404 is a missing template
// only when the API says so: E2B's API server answers "template '<id>' not
// found", or "tag '<tag>' does not exist for template '<id>'"
// (packages/api/internal/cache/templates/errors.go of
// github.com/e2b-dev/infra). Any other 404 (no such route: an API URL
// that is not E2B's) means no machine gone, and is a plain error. The
// other statuses mean what they do for every call: 400 a refusal with the
// API's message.
func createFailure(status int, raw []byte) (string, error) {
	msg := hosted.Message(raw)
	if status != http.StatusNotFound {
		return msg, nil
	}
	if templateMissing(msg) {
		return msg, providers.ErrBadImage
	}
	return msg, httpapi.ErrPlain
}

// templateMissing reports whether msg, the message of a 404 to a create,
// says that the template (or its tag) does not exist.
func templateMissing(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "template") && (strings.Contains(m, "not found") || strings.Contains(m, "does not exist"))
}

var (
	_ providers.Provider          = (*Provider)(nil)
	_ providers.Lister            = (*Provider)(nil)
	_ providers.Transporter       = (*Provider)(nil)
	_ providers.CredentialChecker = (*Provider)(nil)
	_ providers.Describer         = describer{}
)
