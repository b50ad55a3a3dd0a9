// Package modal runs Berth computers as Modal sandboxes from an image
// built from Berth's headless or desktop image (by its Modal image id),
// with computerd's port 7070 opened as an encrypted tunnel that the
// supervisor reaches.
//
// Modal documents its sandbox API only through its client libraries,
// which speak gRPC to the service modal.client.ModalClient (the file
// modal_proto/api.proto of github.com/modal-labs/modal-client). This
// provider calls those documented methods through the Connect protocol's
// JSON mapping of gRPC (POST <server>/modal.client.ModalClient/<Method>,
// application/json bodies with the proto3 JSON field names, errors as
// {"code", "message"} with Connect's HTTP statuses), authenticated with
// the x-modal-token-id and x-modal-token-secret headers the clients send:
//
//   - AppGetOrCreate names the app sandboxes belong to (MODAL_APP);
//   - SecretGetOrCreate holds the computer's variables (an app-owned
//     secret), since a sandbox gets its environment from secrets;
//   - SandboxCreate with the image id, timeoutSecs (the lease plus a
//     minute: Modal ends it if the supervisor cannot), the secret, port
//     7070 open, and Berth's labels as tags;
//   - SandboxGetTunnels for the tunnel to port 7070;
//   - SandboxList by tags, batch after batch (beforeTimestamp), and
//     SandboxTerminate.
package modal

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/hosted"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id.
const ID = "modal"

// Credentials a connection gives.
const (
	CredTokenID     = "tokenId"
	CredTokenSecret = "tokenSecret"
)

// Settings the provider reads.
const (
	SettingServerURL     = "MODAL_SERVER_URL"
	SettingApp           = "MODAL_APP"
	SettingEnvironment   = "MODAL_ENVIRONMENT"
	SettingHeadlessImage = "MODAL_IMAGE_HEADLESS"
	SettingDesktopImage  = "MODAL_IMAGE_DESKTOP"
)

// Defaults of the settings.
const (
	DefaultServerURL = "https://api.modal.com"
	DefaultApp       = "berth"
)

// Service is the gRPC service the methods belong to.
const Service = "modal.client.ModalClient"

// Grace is added to the lease for the sandbox's own timeout.
const Grace = time.Minute

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{
			ServerURL:     cfg.Get(SettingServerURL, DefaultServerURL),
			App:           cfg.Get(SettingApp, DefaultApp),
			Environment:   cfg.Get(SettingEnvironment, ""),
			HeadlessImage: cfg.Get(SettingHeadlessImage, ""),
			DesktopImage:  cfg.Get(SettingDesktopImage, ""),
			Logger:        cfg.Logger,
		})
	})
	providers.Describe(ID, (*Modal)(nil))
}

// Options configure the provider.
type Options struct {
	ServerURL   string
	App         string
	Environment string
	// HeadlessImage and DesktopImage are Modal image ids (im-...) built
	// from Berth's images.
	HeadlessImage, DesktopImage string
	// Scheme of tunnel URLs (default https).
	Scheme string
	// Transport carries the API calls and the tunnel traffic (default
	// http.DefaultTransport).
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// Modal is the provider.
type Modal struct {
	o   Options
	api *httpapi.Client
	log *slog.Logger

	mu   sync.Mutex
	apps map[string]string // app id by token id
}

// New returns a provider; it does not call Modal.
func New(o Options) (*Modal, error) {
	var err error
	if o.ServerURL, err = hosted.APIURL(SettingServerURL, o.ServerURL); err != nil {
		return nil, err
	}
	if o.HeadlessImage == "" {
		return nil, fmt.Errorf("%s is required: the Modal image id (im-...) of Berth's headless image", SettingHeadlessImage)
	}
	if o.DesktopImage == "" {
		o.DesktopImage = o.HeadlessImage
	}
	if o.App == "" {
		o.App = DefaultApp
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
	return &Modal{o: o, log: o.Logger.With("component", ID), apps: map[string]string{}, api: &httpapi.Client{
		BaseURL: o.ServerURL + "/" + Service + "/", HTTP: &http.Client{Transport: o.Transport}, Timeout: 2 * time.Minute,
		KeyName: CredTokenSecret,
		Auth:    func(h http.Header, secret string) { h.Set("x-modal-token-secret", secret) },
		Failure: failure,
	}}, nil
}

// Describe implements providers.Describer.
func (*Modal) Describe() providers.Description {
	return providers.Description{
		Summary: "Modal sandboxes, reached through an encrypted tunnel to port 7070",
		Settings: []providers.Setting{
			{Name: SettingServerURL, Default: DefaultServerURL, Help: "Modal's API server"},
			{Name: SettingApp, Default: DefaultApp, Help: "the app sandboxes belong to"},
			{Name: SettingEnvironment, Help: "the Modal environment (the account's default when empty)"},
			{Name: SettingHeadlessImage, Required: true, Help: "Modal image id (im-...) built from the headless image"},
			{Name: SettingDesktopImage, Help: "Modal image id built from the desktop image (default: the headless one)"},
		},
		Credentials: []providers.Setting{
			{Name: CredTokenID, Required: true, Help: "a Modal token id (ak-...)"},
			{Name: CredTokenSecret, Required: true, Secret: true, Help: "its secret (as-...)"},
		},
	}
}

// CheckCredentials requires tokenId and tokenSecret and nothing else.
func (m *Modal) CheckCredentials(c map[string]string) error { return credentials.Check(c) }

// credentials are the credentials a connection gives.
var credentials = hosted.Credentials{Provider: ID, List: []hosted.Credential{
	{Name: CredTokenID, Want: "a Modal token (modal token new)"},
	{Name: CredTokenSecret, Want: "a Modal token (modal token new)"},
}}

type tag struct {
	TagName  string `json:"tagName"`
	TagValue string `json:"tagValue"`
}

type tunnel struct {
	Host          string `json:"host"`
	Port          int    `json:"port"`
	ContainerPort int    `json:"containerPort"`
}

type sandboxInfo struct {
	ID        string   `json:"id"`
	Tags      []tag    `json:"tags"`
	Tunnels   []tunnel `json:"tunnels"`
	CreatedAt float64  `json:"createdAt"`
	TaskInfo  *struct {
		FinishedAt float64 `json:"finishedAt"`
	} `json:"taskInfo"`
}

func tagsOf(labels map[string]string) []tag {
	out := make([]tag, 0, len(labels))
	for k, v := range labels {
		out = append(out, tag{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TagName < out[j].TagName })
	return out
}

func labelsOf(tags []tag) map[string]string {
	out := make(map[string]string, len(tags))
	for _, t := range tags {
		out[t.TagName] = t.TagValue
	}
	return out
}

func (m *Modal) endpoint(ts []tunnel) string {
	for _, t := range ts {
		if t.ContainerPort == computerd.Port && t.Host != "" {
			port := t.Port
			if port == 0 {
				port = 443
			}
			return fmt.Sprintf("%s://%s:%d", m.o.Scheme, t.Host, port)
		}
	}
	return ""
}

// app returns the id of the app sandboxes belong to.
func (m *Modal) app(ctx context.Context, c map[string]string) (string, error) {
	m.mu.Lock()
	id, ok := m.apps[c[CredTokenID]]
	m.mu.Unlock()
	if ok {
		return id, nil
	}
	var res struct {
		AppID string `json:"appId"`
	}
	req := map[string]any{"appName": m.o.App, "environmentName": m.o.Environment, "objectCreationType": "OBJECT_CREATION_TYPE_CREATE_IF_MISSING"}
	if _, err := m.call(ctx, c, "AppGetOrCreate", req, &res); err != nil {
		return "", fmt.Errorf("app %s: %w", m.o.App, err)
	}
	m.mu.Lock()
	m.apps[c[CredTokenID]] = res.AppID
	m.mu.Unlock()
	return res.AppID, nil
}

// forgetApp drops the app id cached for the connection's token.
func (m *Modal) forgetApp(c map[string]string) {
	m.mu.Lock()
	delete(m.apps, c[CredTokenID])
	m.mu.Unlock()
}

// Create makes the computer's secret, creates the sandbox and waits for
// its tunnel.
func (m *Modal) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	c := spec.Credentials
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: tokenId and tokenSecret are required", spec.ComputerID, providers.ErrBadCredentials)
	}
	// A failure before SandboxCreate made nothing that could run: it is
	// definite (providers.ErrRefused), so the session is not left
	// uncertain for a person to confirm.
	appID, err := m.app(ctx, c)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w (%w: no sandbox was made)", spec.ComputerID, err, providers.ErrRefused)
	}
	var sec struct {
		SecretID string `json:"secretId"`
	}
	if code, err := m.call(ctx, c, "SecretGetOrCreate", map[string]any{
		"objectCreationType": "OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP", "envDict": hosted.Env(spec), "appId": appID,
	}, &sec); err != nil {
		if code == http.StatusNotFound {
			m.forgetApp(c) // the app is gone: the next start makes it again
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: its secret: %w (%w: no sandbox was made)", spec.ComputerID, err, providers.ErrRefused)
	}
	image := m.o.HeadlessImage
	if spec.Image == providers.ImageDesktop {
		image = m.o.DesktopImage
	}
	var created struct {
		SandboxID string `json:"sandboxId"`
	}
	code, err := m.call(ctx, c, "SandboxCreate", map[string]any{
		"appId": appID,
		"definition": map[string]any{
			"imageId":     image,
			"timeoutSecs": int(hosted.Timeout(spec, Grace) / time.Second),
			"secretIds":   []string{sec.SecretID},
			"openPorts":   map[string]any{"ports": []map[string]any{{"port": computerd.Port}}},
		},
		"tags": tagsOf(spec.Labels()),
	}, &created)
	if err != nil {
		if code == http.StatusNotFound || code == http.StatusBadRequest { // not_found, invalid_argument
			return providers.Machine{}, fmt.Errorf("create computer %s: image %q: %w: %v", spec.ComputerID, image, providers.ErrBadImage, err)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	var tun struct {
		Tunnels []tunnel `json:"tunnels"`
	}
	if _, err := m.call(ctx, c, "SandboxGetTunnels", map[string]any{"sandboxId": created.SandboxID, "timeout": 55}, &tun); err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: tunnels of %s: %w", spec.ComputerID, created.SandboxID, err)
	}
	ep := m.endpoint(tun.Tunnels)
	if ep == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: sandbox %s has no tunnel to port %d", spec.ComputerID, providers.ErrUnavailable, created.SandboxID, computerd.Port)
	}
	m.log.Info("sandbox created", "computer", spec.ComputerID, "sandbox", created.SandboxID, "image", image)
	return providers.Machine{ID: created.SandboxID, Endpoint: ep, Labels: spec.Labels()}, nil
}

// Destroy terminates the sandbox; one already gone is done.
func (m *Modal) Destroy(ctx context.Context, machineID string) error {
	c := providers.CredentialsFrom(ctx)
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return fmt.Errorf("destroy %s: %w: no Modal token in the call's context", machineID, providers.ErrBadCredentials)
	}
	if code, err := m.call(ctx, c, "SandboxTerminate", map[string]any{"sandboxId": machineID}, nil); err != nil && code != http.StatusNotFound {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	m.log.Info("sandbox terminated", "sandbox", machineID)
	return nil
}

// List returns the running sandboxes of the app tagged with Berth's
// managed label; without a token in the context it answers nothing.
// SandboxList answers in batches, newest first: as Modal's own client
// does, List asks again for those created before the last one it got,
// until a batch comes back empty (at most maxListPages batches).
func (m *Modal) List(ctx context.Context) ([]providers.Machine, error) {
	c := providers.CredentialsFrom(ctx)
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return nil, nil
	}
	appID, err := m.app(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []providers.Machine
	var before float64
	for range maxListPages {
		req := map[string]any{
			"appId": appID, "environmentName": m.o.Environment, "includeFinished": false,
			"tags": []tag{{providers.LabelManaged, "true"}},
		}
		if before > 0 {
			req["beforeTimestamp"] = before
		}
		var res struct {
			Sandboxes []sandboxInfo `json:"sandboxes"`
		}
		if _, err := m.call(ctx, c, "SandboxList", req, &res); err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		if len(res.Sandboxes) == 0 {
			return out, nil
		}
		for _, s := range res.Sandboxes {
			if s.TaskInfo != nil && s.TaskInfo.FinishedAt > 0 {
				continue
			}
			labels := labelsOf(s.Tags)
			if labels[providers.LabelManaged] != "true" {
				continue
			}
			out = append(out, providers.Machine{ID: s.ID, Endpoint: m.endpoint(s.Tunnels), Labels: labels})
		}
		last := res.Sandboxes[len(res.Sandboxes)-1].CreatedAt
		if last <= 0 || before > 0 && last >= before {
			return nil, fmt.Errorf("list sandboxes: a batch did not move back in time (createdAt %v after %v)", last, before)
		}
		before = last
	}
	return nil, fmt.Errorf("list sandboxes: more than %d batches", maxListPages)
}

// maxListPages bounds the batches one List reads.
const maxListPages = 1000

// Transport implements providers.Transporter: tunnels are reached with
// the provider's own transport.
func (m *Modal) Transport(machine providers.Machine, credentials map[string]string) http.RoundTripper {
	return m.o.Transport
}

// call invokes a method of the service with the Connect protocol's JSON
// mapping and the connection's token.
func (m *Modal) call(ctx context.Context, c map[string]string, method string, in, out any) (int, error) {
	h := http.Header{}
	h.Set("Connect-Protocol-Version", "1")
	h.Set("x-modal-token-id", c[CredTokenID])
	return m.api.Do(ctx, c[CredTokenSecret], httpapi.Call{Method: http.MethodPost, Path: method, Header: h, Body: in}, out)
}

// codes are the Connect error codes whose meaning the HTTP status alone
// does not give (see httpapi.Status).
var codes = map[string]error{
	"unauthenticated":     providers.ErrBadCredentials,
	"permission_denied":   providers.ErrBadCredentials,
	"resource_exhausted":  providers.ErrCapacity,
	"not_found":           providers.ErrNotFound,
	"invalid_argument":    providers.ErrRefused,
	"failed_precondition": providers.ErrRefused,
	"already_exists":      providers.ErrRefused,
}

// failure reads a Connect error, {"code", "message"}: the code says what
// it means where the status does not.
func failure(status int, raw []byte) (string, error) {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Code == "" {
		return hosted.Message(raw), nil
	}
	msg := e.Code
	if e.Message != "" {
		msg += ": " + hosted.Message(raw)
	}
	if kind, ok := codes[e.Code]; ok && kind != httpapi.Status(status) {
		return msg, kind
	}
	return msg, nil
}

var (
	_ providers.Provider          = (*Modal)(nil)
	_ providers.Lister            = (*Modal)(nil)
	_ providers.Transporter       = (*Modal)(nil)
	_ providers.CredentialChecker = (*Modal)(nil)
	_ providers.Describer         = (*Modal)(nil)
)
