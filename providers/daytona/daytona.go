// Package daytona runs Berth computers as Daytona sandboxes, started from
// snapshots of Berth's headless and desktop images whose entrypoint runs
// computerd. The supervisor reaches computerd through Daytona's preview
// proxy (the port 7070 preview URL, with the sandbox's preview token);
// sandboxes are private, carry Berth's labels, are listed by them, and get
// an auto-stop interval just past the lease with auto-delete on stop, so
// that Daytona removes a sandbox the supervisor could not.
//
// The API is Daytona's REST API (github.com/daytonaio/daytona,
// apps/api/src/sandbox/controllers/sandbox.controller.ts and its DTOs):
// POST /sandbox, GET /sandbox/{id}, GET /sandbox?labels=, DELETE
// /sandbox/{id} and GET /sandbox/{id}/ports/{port}/preview-url, with
// "Authorization: Bearer <apiKey>" and, when given, the
// X-Daytona-Organization-ID header.
package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/hosted"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id.
const ID = "daytona"

// Credentials a connection gives.
const (
	CredAPIKey       = "apiKey"
	CredOrganization = "organizationId" // optional
)

// Settings the provider reads.
const (
	SettingAPIURL           = "DAYTONA_API_URL"
	SettingHeadlessSnapshot = "DAYTONA_SNAPSHOT_HEADLESS"
	SettingDesktopSnapshot  = "DAYTONA_SNAPSHOT_DESKTOP"
	SettingTarget           = "DAYTONA_TARGET"
)

// Defaults of the settings.
const (
	DefaultAPIURL           = "https://app.daytona.io/api"
	DefaultHeadlessSnapshot = "berth-headless"
	DefaultDesktopSnapshot  = "berth-desktop"
)

// PreviewTokenHeader carries a private sandbox's preview token.
const PreviewTokenHeader = "x-daytona-preview-token"

// OrganizationHeader names the organization a call acts in.
const OrganizationHeader = "X-Daytona-Organization-ID"

// Grace is added to the lease for the auto-stop interval.
const Grace = time.Minute

// Bounds of the waits on Daytona's asynchronous state changes.
const (
	startTimeout   = 3 * time.Minute
	destroyTimeout = 2 * time.Minute
	maxListPages   = 100
)

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{
			APIURL:           cfg.Get(SettingAPIURL, DefaultAPIURL),
			HeadlessSnapshot: cfg.Get(SettingHeadlessSnapshot, DefaultHeadlessSnapshot),
			DesktopSnapshot:  cfg.Get(SettingDesktopSnapshot, DefaultDesktopSnapshot),
			Target:           cfg.Get(SettingTarget, ""),
			Logger:           cfg.Logger,
		})
	})
	providers.Describe(ID, (*Daytona)(nil))
}

// Options configure a Daytona provider.
type Options struct {
	APIURL                            string
	HeadlessSnapshot, DesktopSnapshot string
	// Target is the region sandboxes are made in; empty: Daytona's default.
	Target string
	// Transport carries the API calls and the preview traffic (default
	// http.DefaultTransport).
	Transport http.RoundTripper
	// PollInterval is the wait between state checks (default 500 ms).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Daytona is the provider.
type Daytona struct {
	o   Options
	api *httpapi.Client
	log *slog.Logger
}

// credentials are the credentials a connection gives.
var credentials = hosted.Credentials{Provider: ID, List: []hosted.Credential{
	{Name: CredAPIKey, Want: "a Daytona API key"},
	{Name: CredOrganization, Optional: true},
}}

// New returns a provider; it does not call the API.
func New(o Options) (*Daytona, error) {
	var err error
	if o.APIURL, err = hosted.APIURL(SettingAPIURL, o.APIURL); err != nil {
		return nil, err
	}
	if o.HeadlessSnapshot == "" || o.DesktopSnapshot == "" {
		return nil, fmt.Errorf("%s and %s are required", SettingHeadlessSnapshot, SettingDesktopSnapshot)
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Daytona{o: o, log: o.Logger.With("component", ID), api: &httpapi.Client{
		BaseURL: o.APIURL, HTTP: &http.Client{Transport: o.Transport}, Timeout: time.Minute, KeyName: CredAPIKey,
		Auth:    func(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) },
		Failure: failure,
	}}, nil
}

// Describe implements providers.Describer.
func (*Daytona) Describe() providers.Description {
	return providers.Description{
		Summary: "Daytona sandboxes from snapshots of the headless or desktop image",
		Settings: []providers.Setting{
			{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "the API's base URL"},
			{Name: SettingHeadlessSnapshot, Default: DefaultHeadlessSnapshot, Help: "snapshot of the headless image"},
			{Name: SettingDesktopSnapshot, Default: DefaultDesktopSnapshot, Help: "snapshot of the desktop image"},
			{Name: SettingTarget, Help: "region sandboxes are made in (Daytona's default when empty)"},
		},
		Credentials: []providers.Setting{
			{Name: CredAPIKey, Required: true, Secret: true, Help: "a Daytona API key"},
			{Name: CredOrganization, Help: "the organization to act in (X-Daytona-Organization-ID)"},
		},
	}
}

// CheckCredentials requires an apiKey; organizationId is optional.
func (d *Daytona) CheckCredentials(c map[string]string) error { return credentials.Check(c) }

// sandbox is Daytona's SandboxDto, the fields Berth reads.
type sandbox struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Snapshot    string            `json:"snapshot"`
	State       string            `json:"state"`
	ErrorReason string            `json:"errorReason"`
	Labels      map[string]string `json:"labels"`
}

type previewURL struct {
	SandboxID string `json:"sandboxId"`
	URL       string `json:"url"`
	Token     string `json:"token"`
}

// starting reports whether a sandbox is on its way to started.
func starting(state string) bool {
	switch state {
	case "creating", "starting", "restoring", "pulling_snapshot", "pending_build", "building_snapshot":
		return true
	}
	return false
}

// States that mean a sandbox is gone or going.
func gone(state string) bool { return state == "destroyed" || state == "destroying" }

// Create creates a private sandbox from the snapshot of spec.Image, waits
// until it has started, and returns its port 7070 preview URL with the
// preview token.
func (d *Daytona) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	c := spec.Credentials
	snapshot := d.o.HeadlessSnapshot
	if spec.Image == providers.ImageDesktop {
		snapshot = d.o.DesktopSnapshot
	}
	req := map[string]any{
		"name":               sandboxName(spec),
		"snapshot":           snapshot,
		"env":                hosted.Env(spec),
		"labels":             spec.Labels(),
		"public":             false,
		"autoStopInterval":   int((hosted.Timeout(spec, Grace) + time.Minute - 1) / time.Minute),
		"autoDeleteInterval": 0, // delete as soon as it stops
	}
	if d.o.Target != "" {
		req["target"] = d.o.Target
	}
	var sb sandbox
	if _, err := d.call(ctx, c, http.MethodPost, "/sandbox", req, &sb); err != nil {
		if errors.Is(err, providers.ErrBadImage) {
			return providers.Machine{}, fmt.Errorf("create computer %s: snapshot %q: %w", spec.ComputerID, snapshot, err)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	if sb.ID == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: the answer names no sandbox", spec.ComputerID, providers.ErrUnavailable)
	}
	if err := d.awaitStarted(ctx, c, &sb); err != nil {
		if errors.Is(err, errWillNotStart) {
			// Nothing will run: remove the sandbox, so that the failure is
			// definite and no session waits, uncertain, for a person.
			dctx, cancel := context.WithTimeout(providers.WithCredentials(context.WithoutCancel(ctx), c), destroyTimeout)
			derr := d.Destroy(dctx, sb.ID)
			cancel()
			if derr == nil {
				return providers.Machine{}, fmt.Errorf("create computer %s: sandbox %s: %w (%w: it was removed)", spec.ComputerID, sb.ID, err, providers.ErrRefused)
			}
			d.log.Warn("removing a sandbox that failed to start", "sandbox", sb.ID, "err", derr)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: sandbox %s: %w", spec.ComputerID, sb.ID, err)
	}
	m, err := d.machine(ctx, c, sb)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	d.log.Info("sandbox started", "computer", spec.ComputerID, "sandbox", sb.ID, "snapshot", snapshot)
	return m, nil
}

// sandboxName is the name of the sandbox of spec, unique to the create
// attempt: Daytona refuses a name in use (409), and the sandbox of an
// earlier session of the same computer may still be there (a cleanup a
// person confirmed, one that reconciliation has yet to remove).
func sandboxName(spec providers.Spec) string {
	return "berth-" + spec.ComputerID + "-" + spec.AttemptID
}

// errWillNotStart marks a sandbox that has failed to start or ended.
var errWillNotStart = errors.New("it will not start")

// awaitStarted polls the sandbox until it has started.
func (d *Daytona) awaitStarted(ctx context.Context, c map[string]string, sb *sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for sb.State != "started" {
		switch sb.State {
		case "error", "build_failed":
			return fmt.Errorf("%w: it failed to start: %s (%w)", providers.ErrUnavailable, sb.ErrorReason, errWillNotStart)
		case "destroyed", "destroying", "stopped", "archived":
			return fmt.Errorf("%w: it is %s (%w)", providers.ErrUnavailable, sb.State, errWillNotStart)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: still %q after %s", providers.ErrUnavailable, sb.State, startTimeout)
		case <-time.After(d.o.PollInterval):
		}
		if _, err := d.call(ctx, c, http.MethodGet, "/sandbox/"+url.PathEscape(sb.ID), nil, sb); err != nil {
			return err
		}
	}
	return nil
}

// machine returns the machine of a started sandbox: its preview URL for
// computerd's port, and the preview token.
func (d *Daytona) machine(ctx context.Context, c map[string]string, sb sandbox) (providers.Machine, error) {
	var pv previewURL
	path := fmt.Sprintf("/sandbox/%s/ports/%d/preview-url", url.PathEscape(sb.ID), computerd.Port)
	if _, err := d.call(ctx, c, http.MethodGet, path, nil, &pv); err != nil {
		return providers.Machine{}, fmt.Errorf("preview URL of sandbox %s: %w", sb.ID, err)
	}
	if pv.URL == "" {
		return providers.Machine{}, fmt.Errorf("preview URL of sandbox %s: %w: empty", sb.ID, providers.ErrUnavailable)
	}
	m := providers.Machine{ID: sb.ID, Endpoint: strings.TrimRight(pv.URL, "/"), Labels: sb.Labels}
	if pv.Token != "" {
		m.Header = http.Header{http.CanonicalHeaderKey(PreviewTokenHeader): {pv.Token}}
	}
	return m, nil
}

// Destroy deletes the sandbox and waits until Daytona reports it gone.
func (d *Daytona) Destroy(ctx context.Context, machineID string) error {
	c := providers.CredentialsFrom(ctx)
	path := "/sandbox/" + url.PathEscape(machineID)
	code, err := d.call(ctx, c, http.MethodDelete, path, nil, nil)
	if code == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	for {
		var sb sandbox
		code, err := d.call(wctx, c, http.MethodGet, path, nil, &sb)
		switch {
		case code == http.StatusNotFound, err == nil && sb.State == "destroyed":
			d.log.Info("sandbox deleted", "sandbox", machineID)
			return nil
		case err != nil:
			return fmt.Errorf("destroy %s: %w", machineID, err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("destroy %s: %w: still %q after %s", machineID, providers.ErrUnavailable, sb.State, destroyTimeout)
		case <-time.After(d.o.PollInterval):
		}
	}
}

// List returns the sandboxes with Berth's managed label of the account in
// the context; those that have started come with their preview URL. With
// no credentials in the context it answers nothing.
func (d *Daytona) List(ctx context.Context) ([]providers.Machine, error) {
	c := providers.CredentialsFrom(ctx)
	if c[CredAPIKey] == "" {
		return nil, nil
	}
	labels, _ := json.Marshal(map[string]string{providers.LabelManaged: "true"})
	q := url.Values{"labels": {string(labels)}}
	var out []providers.Machine
	for page := 0; page < maxListPages; page++ {
		var res struct {
			Items      []sandbox `json:"items"`
			NextCursor *string   `json:"nextCursor"`
		}
		if _, err := d.call(ctx, c, http.MethodGet, "/sandbox?"+q.Encode(), nil, &res); err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, sb := range res.Items {
			if sb.Labels[providers.LabelManaged] != "true" || gone(sb.State) {
				continue
			}
			m := providers.Machine{ID: sb.ID, Labels: sb.Labels}
			if starting(sb.State) {
				// A create whose reply was lost is usually still starting:
				// wait for it, so that it can be adopted.
				d.awaitStarted(ctx, c, &sb)
			}
			if sb.State == "started" {
				if pm, err := d.machine(ctx, c, sb); err == nil {
					m = pm
				}
			}
			out = append(out, m)
		}
		if res.NextCursor == nil || *res.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", *res.NextCursor)
	}
	return nil, fmt.Errorf("list sandboxes: %w: more than %d pages", providers.ErrUnavailable, maxListPages)
}

// Transport implements providers.Transporter: computerd is reached
// through Daytona's preview proxy with the provider's own transport; the
// preview token travels in the machine's header.
func (d *Daytona) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return d.o.Transport
}

// call sends one API call with the connection's key, acting in its
// organization when it names one.
func (d *Daytona) call(ctx context.Context, c map[string]string, method, path string, body, out any) (int, error) {
	h := http.Header{}
	if org := c[CredOrganization]; org != "" {
		h.Set(OrganizationHeader, org)
	}
	return d.api.Do(ctx, c[CredAPIKey], httpapi.Call{Method: method, Path: path, Header: h, Body: body}, out)
}

// failure reads Daytona's error answer, {"statusCode", "error",
// "message"}: a 403 about a quota is no room, not a refused key; a 400
// saying "Snapshot <name> not found" (or that it is not active) is a
// missing image, as Daytona answers a create from a snapshot it does not
// have (apps/api/src/sandbox/services/sandbox.service.ts throws
// BadRequestError "Snapshot ${name} not found. Did you add it through the
// Daytona Dashboard?" and "Snapshot ${name} is ${state}"); for the rest
// the status says (a 400 is a refusal with Daytona's message).
func failure(status int, raw []byte) (string, error) {
	msg := hosted.Message(raw)
	switch {
	case status == http.StatusForbidden && strings.Contains(strings.ToLower(msg), "quota"):
		return msg, providers.ErrCapacity
	case status == http.StatusBadRequest && snapshotMissing(msg):
		return msg, providers.ErrBadImage
	}
	return msg, nil
}

// snapshotMissing reports whether Daytona's message says a snapshot is
// missing or not usable.
func snapshotMissing(msg string) bool {
	name, ok := strings.CutPrefix(msg, "Snapshot ")
	return ok && (strings.Contains(name, " not found") || strings.Contains(name, " is "))
}

var (
	_ providers.Provider          = (*Daytona)(nil)
	_ providers.Lister            = (*Daytona)(nil)
	_ providers.Transporter       = (*Daytona)(nil)
	_ providers.CredentialChecker = (*Daytona)(nil)
	_ providers.Describer         = (*Daytona)(nil)
)
