// Package boat is the provider that runs each computer in its own Boat
// (boat.dev) virtual machine: the VM runs Berth's image with Docker, and
// the supervisor reaches computerd through the port the VM hosts. Machines
// are created with no environment, snapshots off and monitoring off, with
// Boat's auto-stop set to the lease as a fallback.
package boat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id the package registers under.
const ID = "boat"

// CredAPIKey is the connection's Boat API key.
const CredAPIKey = "apiKey"

// Settings the provider reads, by name.
const (
	SettingAPIURL        = "BOAT_API_URL"
	SettingSandboxType   = "BOAT_SANDBOX_TYPE"
	SettingHeadlessImage = "BOAT_IMAGE_HEADLESS" // the image reference the VM's Docker pulls
	SettingDesktopImage  = "BOAT_IMAGE_DESKTOP"
)

// Defaults of the settings.
const (
	DefaultAPIURL        = "https://boat.dev/api/v1"
	DefaultSandboxType   = "small"
	DefaultHeadlessImage = "ghcr.io/berthdev/headless:latest"
	DefaultDesktopImage  = "ghcr.io/berthdev/desktop:latest"
)

// ConfirmHeader confirms a delete: it must name the sandbox being deleted.
const ConfirmHeader = "Boat-Confirm-Delete"

const (
	callTimeout  = 30 * time.Second
	readyTimeout = 4 * time.Minute
	// createRetries is how often a create whose reply was lost is sent
	// again with the same Idempotency-Key, which returns the same sandbox.
	createRetries = 3
)

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{
			APIURL: cfg.Get(SettingAPIURL, DefaultAPIURL), SandboxType: cfg.Get(SettingSandboxType, DefaultSandboxType),
			HeadlessImage: cfg.Get(SettingHeadlessImage, DefaultHeadlessImage), DesktopImage: cfg.Get(SettingDesktopImage, DefaultDesktopImage),
			Logger: cfg.Logger,
		})
	})
	providers.Describe(ID, (*Boat)(nil))
}

// Options configure a Boat provider.
type Options struct {
	APIURL        string
	SandboxType   string
	HeadlessImage string
	DesktopImage  string
	// Client sends the API calls; nil means a client of its own.
	Client *http.Client
	// PollInterval is how often state is polled (default 1 s).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Boat is the provider.
type Boat struct {
	o   Options
	api *httpapi.Client
	log *slog.Logger
}

var typeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// New checks o and returns a provider.
func New(o Options) (*Boat, error) {
	api, err := httpapi.BaseURL(SettingAPIURL, cmp.Or(o.APIURL, DefaultAPIURL), DefaultAPIURL)
	if err != nil {
		return nil, err
	}
	o.APIURL = api
	if o.SandboxType == "" {
		o.SandboxType = DefaultSandboxType
	}
	if !typeRE.MatchString(o.SandboxType) {
		return nil, fmt.Errorf("%s=%q: want a sandbox type such as small, default or large", SettingSandboxType, o.SandboxType)
	}
	if o.HeadlessImage == "" {
		o.HeadlessImage = DefaultHeadlessImage
	}
	if o.DesktopImage == "" {
		o.DesktopImage = DefaultDesktopImage
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	hc := o.Client
	if hc == nil {
		hc = httpapi.NewHTTPClient()
	}
	b := &Boat{o: o, log: o.Logger.With("component", "boat"), api: &httpapi.Client{
		BaseURL: o.APIURL, HTTP: hc, Timeout: callTimeout, KeyName: CredAPIKey, Failure: failure,
		Auth: func(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) },
	}}
	return b, nil
}

// CheckCredentials requires an apiKey and nothing else.
func (b *Boat) CheckCredentials(c map[string]string) error {
	return httpapi.CheckKey(ID, c, CredAPIKey, "the key from the Boat dashboard")
}

// sandbox is the part of a Boat sandbox Berth reads.
type sandbox struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	State    string            `json:"state"` // provisioning, running, stopping, archived, deleting, deleted, failed
	Metadata map[string]string `json:"metadata"`
	Hosts    []struct {
		Port int    `json:"port"`
		URL  string `json:"url"`
	} `json:"hosts"`
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends one API call with key; out receives a 2xx answer. Errors
// name the call and Boat's error code, never the key.
func (b *Boat) call(ctx context.Context, key, method, path string, hdr http.Header, body, out any) (int, error) {
	return b.api.Do(ctx, key, httpapi.Call{Method: method, Path: path, Header: hdr, Body: body}, out)
}

// failure reads Boat's error answer ({"error": {"code", "message"}}): a
// quota_exceeded code is no room, an image_not_found a missing image.
func failure(status int, raw []byte) (string, error) {
	var ae apiError
	json.Unmarshal(raw, &ae)
	msg := ae.Error.Code + " " + ae.Error.Message
	switch {
	case ae.Error.Code == "quota_exceeded":
		return msg, providers.ErrCapacity
	case status == http.StatusBadRequest && ae.Error.Code == "image_not_found":
		return msg, providers.ErrBadImage
	}
	return msg, nil
}

// Name returns the sandbox name of a computer.
func Name(computerID string) string { return "berth-c-" + strings.ToLower(computerID) }

// Create makes the VM (no environment, snapshots and monitoring off,
// auto-stop at the lease, Berth's labels as metadata), waits for it to
// run, starts the image in it with Docker, and hosts computerd's port.
func (b *Boat) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	key := spec.Credentials[CredAPIKey]
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	body := map[string]any{
		"name":            Name(spec.ComputerID),
		"type":            b.o.SandboxType,
		"env":             map[string]string{},
		"snapshots":       map[string]any{"enabled": false},
		"monitoring":      map[string]any{"enabled": false},
		"autoStopSeconds": max(int(spec.Lease.Seconds()), 60),
		"metadata":        spec.Labels(),
	}
	hdr := http.Header{"Idempotency-Key": {spec.AttemptID}}
	var created struct {
		Sandbox sandbox `json:"sandbox"`
	}
	var err error
	for try := 0; try < createRetries; try++ {
		_, err = b.call(ctx, key, "POST", "/sandboxes", hdr, body, &created)
		if err == nil || !errors.Is(err, providers.ErrUnavailable) || ctx.Err() != nil {
			break
		}
		b.log.Warn("create reply lost; sending it again with the same idempotency key", "computer", spec.ComputerID, "try", try+1, "err", err)
	}
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	id := created.Sandbox.ID
	if err := b.waitState(ctx, key, id, "running"); err != nil {
		return providers.Machine{}, b.undo(ctx, key, id, fmt.Errorf("create computer %s: sandbox %s: %w", spec.ComputerID, id, err))
	}
	image := b.o.HeadlessImage
	if spec.Image == providers.ImageDesktop {
		image = b.o.DesktopImage
	}
	var res struct {
		ExitCode int    `json:"exitCode"`
		Stderr   string `json:"stderr"`
	}
	if _, err := b.call(ctx, key, "POST", "/sandboxes/"+id+"/commands", nil, map[string]any{"command": DockerRun(spec, image), "timeout": 120}, &res); err != nil {
		return providers.Machine{}, b.undo(ctx, key, id, fmt.Errorf("create computer %s: start the image: %w", spec.ComputerID, err))
	}
	if res.ExitCode != 0 {
		werr := providers.ErrUnavailable
		if strings.Contains(res.Stderr, "manifest unknown") || strings.Contains(res.Stderr, "not found") {
			werr = providers.ErrBadImage
		}
		return providers.Machine{}, b.undo(ctx, key, id, fmt.Errorf("create computer %s: docker run exited %d: %w: %s", spec.ComputerID, res.ExitCode, werr, firstLine(res.Stderr)))
	}
	var host struct {
		URL string `json:"url"`
	}
	if _, err := b.call(ctx, key, "POST", "/sandboxes/"+id+"/host", nil, map[string]any{"port": computerd.Port, "public": true}, &host); err != nil {
		return providers.Machine{}, b.undo(ctx, key, id, fmt.Errorf("create computer %s: host port %d: %w", spec.ComputerID, computerd.Port, err))
	}
	b.log.Info("computer created", "computer", spec.ComputerID, "sandbox", id)
	return providers.Machine{ID: id, Endpoint: strings.TrimRight(host.URL, "/"), Labels: spec.Labels()}, nil
}

// undo deletes the VM of a create that failed for sure (a missing image,
// no room, a refused key, a request Boat refused), since the supervisor
// takes such a failure to mean nothing was left behind. If the delete
// fails too, the error is reported as an outage instead, so that the
// supervisor searches for the VM by its label. Other failures leave the
// VM to that search.
func (b *Boat) undo(ctx context.Context, key, id string, err error) error {
	if !errors.Is(err, providers.ErrBadImage) && !errors.Is(err, providers.ErrCapacity) &&
		!errors.Is(err, providers.ErrBadCredentials) && !errors.Is(err, providers.ErrRefused) {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	if derr := b.Destroy(providers.WithCredentials(dctx, map[string]string{CredAPIKey: key}), id); derr != nil {
		return fmt.Errorf("%w (%v); deleting its VM failed too: %v", providers.ErrUnavailable, err, derr)
	}
	return err
}

func firstLine(s string) string { l, _, _ := strings.Cut(strings.TrimSpace(s), "\n"); return l }

// DockerRun is the command that starts the image in the VM, hardened as a
// Docker computer is, with computerd's token hash and the computer's
// environment as its only variables.
func DockerRun(spec providers.Spec, image string) string {
	args := []string{"docker", "run", "-d", "--name", "berth-computer", "--restart", "no",
		"--user", "1000:1000", "--read-only", "--tmpfs", "/tmp:rw,size=1g", "--shm-size", "512m",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--pids-limit", "512",
		"-p", fmt.Sprintf("%d:%d", computerd.Port, computerd.Port),
		"-e", computerd.EnvTokenHash + "=" + spec.TokenHash, "-e", computerd.EnvComputerID + "=" + spec.ComputerID}
	env := providers.HostedEnv(spec.Env)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-e", k+"="+env[k])
	}
	args = append(args, image)
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// waitState polls a sandbox until it is in state.
func (b *Boat) waitState(ctx context.Context, key, id, want string) error {
	for {
		var got struct {
			Sandbox sandbox `json:"sandbox"`
		}
		if _, err := b.call(ctx, key, "GET", "/sandboxes/"+id, nil, nil, &got); err != nil {
			return err
		}
		switch got.Sandbox.State {
		case want:
			return nil
		case "failed", "deleted", "archived":
			return fmt.Errorf("%w: sandbox is %s", providers.ErrUnavailable, got.Sandbox.State)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: sandbox still %s: %v", providers.ErrUnavailable, got.Sandbox.State, ctx.Err())
		case <-time.After(b.o.PollInterval):
		}
	}
}

// Destroy deletes the sandbox, confirmed with ConfirmHeader, and polls
// until Boat reports it gone.
func (b *Boat) Destroy(ctx context.Context, machineID string) error {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	_, err := b.call(ctx, key, "DELETE", "/sandboxes/"+machineID, http.Header{ConfirmHeader: {machineID}}, nil, nil)
	if errors.Is(err, providers.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	for {
		var got struct {
			Sandbox sandbox `json:"sandbox"`
		}
		_, err := b.call(ctx, key, "GET", "/sandboxes/"+machineID, nil, nil, &got)
		if errors.Is(err, providers.ErrNotFound) || (err == nil && got.Sandbox.State == "deleted") {
			b.log.Info("computer destroyed", "sandbox", machineID)
			return nil
		}
		if err != nil {
			return fmt.Errorf("destroy %s: %w", machineID, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("destroy %s: %w: still %s", machineID, providers.ErrUnavailable, got.Sandbox.State)
		case <-time.After(b.o.PollInterval):
		}
	}
}

// List returns the account's sandboxes that carry Berth's managed label.
func (b *Boat) List(ctx context.Context) ([]providers.Machine, error) {
	key := providers.CredentialsFrom(ctx)[CredAPIKey]
	var got struct {
		Sandboxes []sandbox `json:"sandboxes"`
	}
	q := url.Values{"metadata[" + providers.LabelManaged + "]": {"true"}}
	if _, err := b.call(ctx, key, "GET", "/sandboxes?"+q.Encode(), nil, nil, &got); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var out []providers.Machine
	for _, s := range got.Sandboxes {
		if s.Metadata[providers.LabelManaged] != "true" || s.State == "deleted" {
			continue
		}
		m := providers.Machine{ID: s.ID, Labels: s.Metadata}
		for _, h := range s.Hosts {
			if h.Port == computerd.Port {
				m.Endpoint = strings.TrimRight(h.URL, "/")
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// Describe implements providers.Describer.
func (*Boat) Describe() providers.Description {
	return providers.Description{
		Summary: "one Boat VM per computer, running Berth's image with Docker",
		Settings: []providers.Setting{
			{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "Boat's API"},
			{Name: SettingSandboxType, Default: DefaultSandboxType, Help: "the VM size: small, default or large"},
			{Name: SettingHeadlessImage, Default: DefaultHeadlessImage, Help: "the headless image the VM's Docker pulls"},
			{Name: SettingDesktopImage, Default: DefaultDesktopImage, Help: "the desktop image the VM's Docker pulls"},
		},
		Credentials: []providers.Setting{{Name: CredAPIKey, Required: true, Secret: true, Help: "a Boat API key"}},
	}
}

var (
	_ providers.Provider          = (*Boat)(nil)
	_ providers.Lister            = (*Boat)(nil)
	_ providers.CredentialChecker = (*Boat)(nil)
	_ providers.Describer         = (*Boat)(nil)
)
