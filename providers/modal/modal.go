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
//   - SandboxList by tags, and SandboxTerminate.
package modal

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
	"sync"
	"time"

	"github.com/berthdev/berth/images/computerd"
	"github.com/berthdev/berth/providers"
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
	hc  *http.Client
	log *slog.Logger

	mu   sync.Mutex
	apps map[string]string // app id by token id
}

// New returns a provider; it does not call Modal.
func New(o Options) (*Modal, error) {
	u, err := url.Parse(o.ServerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s %q is not an http(s) URL", SettingServerURL, o.ServerURL)
	}
	o.ServerURL = strings.TrimRight(o.ServerURL, "/")
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
	return &Modal{o: o, hc: &http.Client{Transport: o.Transport, Timeout: 2 * time.Minute},
		log: o.Logger.With("component", ID), apps: map[string]string{}}, nil
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
func (m *Modal) CheckCredentials(c map[string]string) error {
	for k := range c {
		if k != CredTokenID && k != CredTokenSecret {
			return fmt.Errorf("%q is not a modal credential: want %q and %q", k, CredTokenID, CredTokenSecret)
		}
	}
	for _, k := range []string{CredTokenID, CredTokenSecret} {
		if strings.TrimSpace(c[k]) == "" {
			return fmt.Errorf("%s is missing: want a Modal token (modal token new)", k)
		}
	}
	return nil
}

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
	ID       string   `json:"id"`
	Tags     []tag    `json:"tags"`
	Tunnels  []tunnel `json:"tunnels"`
	TaskInfo *struct {
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
	if err := m.call(ctx, c, "AppGetOrCreate", req, &res); err != nil {
		return "", fmt.Errorf("app %s: %w", m.o.App, err)
	}
	m.mu.Lock()
	m.apps[c[CredTokenID]] = res.AppID
	m.mu.Unlock()
	return res.AppID, nil
}

// Create makes the computer's secret, creates the sandbox and waits for
// its tunnel.
func (m *Modal) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	c := spec.Credentials
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: tokenId and tokenSecret are required", spec.ComputerID, providers.ErrBadCredentials)
	}
	appID, err := m.app(ctx, c)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	env := providers.HostedEnv(spec.Env) // the egress proxy does not apply
	env[computerd.EnvTokenHash] = spec.TokenHash
	env[computerd.EnvComputerID] = spec.ComputerID
	var sec struct {
		SecretID string `json:"secretId"`
	}
	if err := m.call(ctx, c, "SecretGetOrCreate", map[string]any{
		"objectCreationType": "OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP", "envDict": env, "appId": appID,
	}, &sec); err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: its secret: %w", spec.ComputerID, err)
	}
	image := m.o.HeadlessImage
	if spec.Image == providers.ImageDesktop {
		image = m.o.DesktopImage
	}
	lease := spec.Lease
	if lease <= 0 {
		lease = 15 * time.Minute
	}
	var created struct {
		SandboxID string `json:"sandboxId"`
	}
	err = m.call(ctx, c, "SandboxCreate", map[string]any{
		"appId": appID,
		"definition": map[string]any{
			"imageId":     image,
			"timeoutSecs": int((lease + Grace) / time.Second),
			"secretIds":   []string{sec.SecretID},
			"openPorts":   map[string]any{"ports": []map[string]any{{"port": computerd.Port}}},
		},
		"tags": tagsOf(spec.Labels()),
	}, &created)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && (ae.code == "not_found" || ae.code == "invalid_argument") {
			return providers.Machine{}, fmt.Errorf("create computer %s: image %q: %w: %s", spec.ComputerID, image, providers.ErrBadImage, ae.msg)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	var tun struct {
		Tunnels []tunnel `json:"tunnels"`
	}
	if err := m.call(ctx, c, "SandboxGetTunnels", map[string]any{"sandboxId": created.SandboxID, "timeout": 55}, &tun); err != nil {
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
	err := m.call(ctx, c, "SandboxTerminate", map[string]any{"sandboxId": machineID}, nil)
	if errors.Is(err, providers.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	m.log.Info("sandbox terminated", "sandbox", machineID)
	return nil
}

// List returns the running sandboxes of the app tagged with Berth's
// managed label; without a token in the context it answers nothing.
func (m *Modal) List(ctx context.Context) ([]providers.Machine, error) {
	c := providers.CredentialsFrom(ctx)
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return nil, nil
	}
	appID, err := m.app(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var res struct {
		Sandboxes []sandboxInfo `json:"sandboxes"`
	}
	if err := m.call(ctx, c, "SandboxList", map[string]any{
		"appId": appID, "environmentName": m.o.Environment, "includeFinished": false,
		"tags": []tag{{providers.LabelManaged, "true"}},
	}, &res); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []providers.Machine
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
	return out, nil
}

// Transport implements providers.Transporter: tunnels are reached with
// the provider's own transport.
func (m *Modal) Transport(machine providers.Machine, credentials map[string]string) http.RoundTripper {
	return m.o.Transport
}

type apiError struct {
	status int
	code   string
	msg    string
	kind   error
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%v: Modal answered %s: %s", e.kind, e.code, e.msg)
}
func (e *apiError) Unwrap() error { return e.kind }

// call invokes a method of the service with the Connect protocol's JSON
// mapping.
func (m *Modal) call(ctx context.Context, c map[string]string, method string, in, out any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.o.ServerURL+"/"+Service+"/"+method, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("x-modal-token-id", c[CredTokenID])
	req.Header.Set("x-modal-token-secret", c[CredTokenSecret])
	resp, err := m.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%w: %s: %v", providers.ErrUnavailable, method, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			return nil
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
			return fmt.Errorf("%w: decode the answer of %s: %v", providers.ErrUnavailable, method, err)
		}
		return nil
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(body, &e) != nil || e.Code == "" {
		e.Code, e.Message = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_")), strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200]
		}
	}
	ae := &apiError{status: resp.StatusCode, code: e.Code, msg: e.Message}
	switch e.Code {
	case "unauthenticated", "permission_denied":
		ae.kind = providers.ErrBadCredentials
	case "resource_exhausted":
		ae.kind = providers.ErrCapacity
	case "not_found":
		ae.kind = providers.ErrNotFound
	case "invalid_argument", "failed_precondition", "already_exists":
		ae.kind = errors.New("request refused")
	default:
		ae.kind = providers.ErrUnavailable
	}
	return fmt.Errorf("%s: %w", method, ae)
}

var (
	_ providers.Provider          = (*Modal)(nil)
	_ providers.Lister            = (*Modal)(nil)
	_ providers.Transporter       = (*Modal)(nil)
	_ providers.CredentialChecker = (*Modal)(nil)
	_ providers.Describer         = (*Modal)(nil)
)
