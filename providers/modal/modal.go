// Package modal runs Berth computers as Modal sandboxes from an image
// built from Berth's headless or desktop image (by its Modal image id),
// with computerd's port 7070 opened as an encrypted tunnel that the
// supervisor reaches.
//
// Modal's API is the gRPC service modal.client.ModalClient (binary
// protobuf over HTTP/2), which its clients call with their client type and
// version, the account's token id and secret, and a short-lived auth token
// they get from AuthTokenGet. The provider calls it through Modal's own Go
// SDK (github.com/modal-labs/modal-client/go), one SDK client per token:
//
//   - Apps.FromName (AppGetOrCreate) names the app sandboxes belong to
//     (MODAL_APP, made if missing);
//   - Images.FromID (ImageFromId) checks the image id;
//   - Sandboxes.Create: the computer's variables become an ephemeral secret
//     (SecretGetOrCreate), then SandboxCreate with the image, the command
//     that the image's CMD names (a sandbox runs the command it is given,
//     not the image's CMD), a timeout of the lease plus a minute (Modal ends
//     it if the supervisor cannot), port 7070 as an encrypted tunnel and
//     Berth's labels as tags; the SDK waits until it is scheduled
//     (SandboxGetTaskId);
//   - Sandbox.Tunnels (SandboxGetTunnels) for the tunnel to port 7070;
//   - Sandboxes.List by tag (SandboxList, batch after batch), with each
//     sandbox's tags (SandboxTagsGet) and tunnels; Sandbox.Terminate
//     (SandboxTerminate).
package modal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/hosted"
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

// The commands a sandbox runs, as the CMD of Berth's images names them
// (images/headless/Dockerfile, images/desktop/Dockerfile): computerd, or
// the desktop's start script, which starts X, the window manager and
// computerd.
var (
	CommandHeadless = []string{"computerd"}
	CommandDesktop  = []string{"desktop-start"}
)

// tunnelWait bounds the wait for a new sandbox's tunnel.
const tunnelWait = 55 * time.Second

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
	// ServerURL is Modal's API server: https:// for TLS, http:// for
	// plain HTTP/2 (a local server).
	ServerURL   string
	App         string
	Environment string
	// HeadlessImage and DesktopImage are Modal image ids (im-...) built
	// from Berth's images.
	HeadlessImage, DesktopImage string
	// Scheme of tunnel URLs (default https).
	Scheme string
	// Transport carries the traffic to the sandboxes' tunnels (default
	// http.DefaultTransport); the API calls go through the SDK's gRPC
	// connection.
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// Modal is the provider.
type Modal struct {
	o   Options
	log *slog.Logger

	mu       sync.Mutex
	accounts map[string]*account // by token id
	closed   bool
}

// account is the SDK client of one Modal token, with what it looked up.
type account struct {
	secret string
	client *modalsdk.Client

	mu     sync.Mutex
	app    *modalsdk.App
	images map[string]*modalsdk.Image
}

// New returns a provider; it does not call Modal.
func New(o Options) (*Modal, error) {
	var err error
	if o.ServerURL, err = hosted.APIURL(SettingServerURL, o.ServerURL); err != nil {
		return nil, err
	}
	// The SDK reads MODAL_SERVER_URL from the process environment itself,
	// before its profile: it must not send the calls elsewhere.
	if env := strings.TrimRight(os.Getenv(SettingServerURL), "/"); env != "" && env != o.ServerURL {
		return nil, fmt.Errorf("%s is %q in the environment but the provider is configured with %q", SettingServerURL, env, o.ServerURL)
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
	if _, err := profile(o.ServerURL); err != nil {
		return nil, err
	}
	return &Modal{o: o, log: o.Logger.With("component", ID), accounts: map[string]*account{}}, nil
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

// profile returns the SDK's configuration for serverURL. The SDK takes
// its server and its choices from a profile, read from ~/.modal.toml
// unless ClientParams.Config gives one; that field's type is not
// exported, so the profile is built through reflection. Giving it keeps
// the supervisor's user's own Modal configuration out of Berth's calls
// and selects the sandbox calls whose sandboxes SandboxList returns
// (sandbox_v2 off).
func profile(serverURL string) (reflect.Value, error) {
	bad := fmt.Errorf("the Modal SDK's ClientParams.Config is not the profile map this provider was written against")
	f, ok := reflect.TypeOf(modalsdk.ClientParams{}).FieldByName("Config")
	if !ok || f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Map ||
		f.Type.Elem().Key().Kind() != reflect.String || f.Type.Elem().Elem().Kind() != reflect.Struct {
		return reflect.Value{}, bad
	}
	mt := f.Type.Elem()
	p := reflect.New(mt.Elem()).Elem()
	off := false
	for name, v := range map[string]any{"ServerURL": serverURL, "SandboxV2": &off, "Active": true} {
		fv := p.FieldByName(name)
		if !fv.IsValid() || !fv.CanSet() || fv.Type() != reflect.TypeOf(v) {
			return reflect.Value{}, bad
		}
		fv.Set(reflect.ValueOf(v))
	}
	cfg := reflect.MakeMap(mt)
	// MODAL_PROFILE, when set, names the profile the SDK reads.
	cfg.SetMapIndex(reflect.ValueOf(cmp.Or(os.Getenv("MODAL_PROFILE"), "berth")).Convert(mt.Key()), p)
	ptr := reflect.New(mt)
	ptr.Elem().Set(cfg)
	return ptr, nil
}

// account returns the SDK client of the connection's token, made on first
// use.
func (m *Modal) account(c map[string]string) (*account, error) {
	id, secret := c[CredTokenID], c[CredTokenSecret]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("%w: the provider is closed", providers.ErrUnavailable)
	}
	if a, ok := m.accounts[id]; ok {
		if a.secret == secret {
			return a, nil
		}
		a.client.Close() // the token's secret changed
		delete(m.accounts, id)
	}
	cfg, err := profile(m.o.ServerURL)
	if err != nil {
		return nil, err
	}
	params := &modalsdk.ClientParams{TokenID: id, TokenSecret: secret, Environment: m.o.Environment,
		Logger: slog.New(infoAndAbove{m.log.With("sdk", "modal-go").Handler()})}
	reflect.ValueOf(params).Elem().FieldByName("Config").Set(cfg)
	client, err := modalsdk.NewClientWithOptions(params)
	if err != nil {
		return nil, fmt.Errorf("modal client: %v", m.scrub(c, err))
	}
	a := &account{secret: secret, client: client, images: map[string]*modalsdk.Image{}}
	m.accounts[id] = a
	return a, nil
}

// Close closes the SDK's connections.
func (m *Modal) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, a := range m.accounts {
		a.client.Close()
		delete(m.accounts, id)
	}
	m.closed = true
}

// app returns the app sandboxes belong to.
func (m *Modal) app(ctx context.Context, a *account) (*modalsdk.App, error) {
	a.mu.Lock()
	app := a.app
	a.mu.Unlock()
	if app != nil {
		return app, nil
	}
	app, err := a.client.Apps.FromName(ctx, m.o.App, &modalsdk.AppFromNameParams{Environment: m.o.Environment, CreateIfMissing: true})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.app = app
	a.mu.Unlock()
	return app, nil
}

// forgetApp drops the app looked up for the account.
func (a *account) forgetApp() {
	a.mu.Lock()
	a.app = nil
	a.mu.Unlock()
}

// image returns the image of id.
func (a *account) image(ctx context.Context, id string) (*modalsdk.Image, error) {
	a.mu.Lock()
	im := a.images[id]
	a.mu.Unlock()
	if im != nil {
		return im, nil
	}
	im, err := a.client.Images.FromID(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.images[id] = im
	a.mu.Unlock()
	return im, nil
}

// imageOf returns the image id and command of an image kind. The desktop
// image runs its start script; where there is no desktop image of its
// own, the headless one runs computerd.
func (m *Modal) imageOf(kind string) (string, []string) {
	if kind == providers.ImageDesktop && m.o.DesktopImage != m.o.HeadlessImage {
		return m.o.DesktopImage, CommandDesktop
	}
	if kind == providers.ImageDesktop {
		return m.o.DesktopImage, CommandHeadless
	}
	return m.o.HeadlessImage, CommandHeadless
}

func (m *Modal) endpoint(ts map[int]*modalsdk.Tunnel) string {
	t := ts[computerd.Port]
	if t == nil || t.Host == "" {
		return ""
	}
	return fmt.Sprintf("%s://%s:%d", m.o.Scheme, t.Host, cmp.Or(t.Port, 443))
}

// Create creates the sandbox and waits for its tunnel.
func (m *Modal) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	c := spec.Credentials
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: tokenId and tokenSecret are required", spec.ComputerID, providers.ErrBadCredentials)
	}
	a, err := m.account(c)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w (%w: no sandbox was made)", spec.ComputerID, err, providers.ErrRefused)
	}
	// A failure before SandboxCreate made nothing that could run: it is
	// definite (providers.ErrRefused), so the session is not left
	// uncertain for a person to confirm.
	app, err := m.app(ctx, a)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: app %s: %w (%w: no sandbox was made)", spec.ComputerID, m.o.App, m.failure(c, err), providers.ErrRefused)
	}
	imageID, command := m.imageOf(spec.Image)
	image, err := a.image(ctx, imageID)
	if err != nil {
		kind := m.failure(c, err)
		if errors.Is(kind, providers.ErrNotFound) {
			kind = fmt.Errorf("%w: %v", providers.ErrBadImage, kind)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: image %q: %w (%w: no sandbox was made)", spec.ComputerID, imageID, kind, providers.ErrRefused)
	}
	sb, err := a.client.Sandboxes.Create(ctx, app, image, &modalsdk.SandboxCreateParams{
		Command:        command,
		Env:            hosted.Env(spec),
		Timeout:        hosted.Timeout(spec, Grace).Truncate(time.Second),
		EncryptedPorts: []int{computerd.Port},
		Tags:           spec.Labels(),
	})
	if err != nil {
		kind := m.failure(c, err)
		if status.Code(cause(err)) == codes.NotFound {
			// The app is gone (stopped on Modal): the next start makes it
			// again. Nothing was made.
			a.forgetApp()
			kind = fmt.Errorf("%w (%w: no sandbox was made)", kind, providers.ErrRefused)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, kind)
	}
	ts, err := sb.Tunnels(ctx, tunnelWait, nil)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: tunnels of %s: %w", spec.ComputerID, sb.SandboxID, m.failure(c, err))
	}
	ep := m.endpoint(ts)
	if ep == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: sandbox %s has no tunnel to port %d", spec.ComputerID, providers.ErrUnavailable, sb.SandboxID, computerd.Port)
	}
	m.log.Info("sandbox created", "computer", spec.ComputerID, "sandbox", sb.SandboxID, "image", imageID, "command", strings.Join(command, " "))
	return providers.Machine{ID: sb.SandboxID, Endpoint: ep, Labels: spec.Labels()}, nil
}

// Destroy terminates the sandbox; one already gone is done.
func (m *Modal) Destroy(ctx context.Context, machineID string) error {
	c := providers.CredentialsFrom(ctx)
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return fmt.Errorf("destroy %s: %w: no Modal token in the call's context", machineID, providers.ErrBadCredentials)
	}
	a, err := m.account(c)
	if err != nil {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	sb, err := a.client.Sandboxes.FromID(ctx, machineID, nil)
	if err == nil {
		_, err = sb.Terminate(ctx, nil)
	}
	if err != nil {
		if kind := m.failure(c, err); !errors.Is(kind, providers.ErrNotFound) {
			return fmt.Errorf("destroy %s: %w", machineID, kind)
		}
	}
	m.log.Info("sandbox terminated", "sandbox", machineID)
	return nil
}

// maxListed bounds the sandboxes one List reads.
const maxListed = 10000

// List returns the running sandboxes of the app tagged with Berth's
// managed label, with their tags and tunnels; without a token in the
// context it answers nothing. SandboxList answers in batches, newest
// first; the SDK asks for those created before the last one it got until
// a batch comes back empty.
func (m *Modal) List(ctx context.Context) ([]providers.Machine, error) {
	c := providers.CredentialsFrom(ctx)
	if c[CredTokenID] == "" || c[CredTokenSecret] == "" {
		return nil, nil
	}
	a, err := m.account(c)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	app, err := m.app(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: app %s: %w", m.o.App, m.failure(c, err))
	}
	all, err := a.client.Sandboxes.List(ctx, &modalsdk.SandboxListParams{AppID: app.AppID, Environment: m.o.Environment,
		Tags: map[string]string{providers.LabelManaged: "true"}})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", m.failure(c, err))
	}
	var out []providers.Machine
	seen := 0
	for sb, err := range all {
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", m.failure(c, err))
		}
		if seen++; seen > maxListed {
			return nil, fmt.Errorf("list sandboxes: more than %d", maxListed)
		}
		labels, err := sb.GetTags(ctx, nil)
		if err != nil {
			if errors.Is(m.failure(c, err), providers.ErrNotFound) {
				continue // ended since
			}
			return nil, fmt.Errorf("list sandboxes: tags of %s: %w", sb.SandboxID, m.failure(c, err))
		}
		if labels[providers.LabelManaged] != "true" {
			continue
		}
		ts, err := sb.Tunnels(ctx, tunnelWait, nil)
		if err != nil {
			if errors.Is(m.failure(c, err), providers.ErrNotFound) {
				continue
			}
			return nil, fmt.Errorf("list sandboxes: tunnels of %s: %w", sb.SandboxID, m.failure(c, err))
		}
		out = append(out, providers.Machine{ID: sb.SandboxID, Endpoint: m.endpoint(ts), Labels: labels})
	}
	return out, nil
}

// Transport implements providers.Transporter: tunnels are reached with
// the provider's own transport.
func (m *Modal) Transport(machine providers.Machine, credentials map[string]string) http.RoundTripper {
	return m.o.Transport
}

// kinds are what Modal's gRPC status codes mean to the supervisor.
var kinds = map[codes.Code]error{
	codes.Unauthenticated:    providers.ErrBadCredentials,
	codes.PermissionDenied:   providers.ErrBadCredentials,
	codes.ResourceExhausted:  providers.ErrCapacity,
	codes.NotFound:           providers.ErrNotFound,
	codes.InvalidArgument:    providers.ErrRefused,
	codes.FailedPrecondition: providers.ErrRefused,
	codes.AlreadyExists:      providers.ErrRefused,
	codes.OutOfRange:         providers.ErrRefused,
	codes.Unavailable:        providers.ErrUnavailable,
	codes.Internal:           providers.ErrUnavailable,
	codes.Unknown:            providers.ErrUnavailable,
	codes.DeadlineExceeded:   providers.ErrUnavailable,
	codes.Canceled:           providers.ErrUnavailable,
	codes.Unimplemented:      providers.ErrUnavailable,
	codes.DataLoss:           providers.ErrUnavailable,
	codes.Aborted:            providers.ErrUnavailable,
}

// cause returns the gRPC status error inside err, or err.
func cause(err error) error {
	var s interface{ GRPCStatus() *status.Status }
	if errors.As(err, &s) {
		return s.(error)
	}
	return err
}

// failure returns an SDK error as the providers' error kind it means,
// with the connection's token taken out of its message (an API may echo
// what it refused).
func (m *Modal) failure(c map[string]string, err error) error {
	msg := m.scrub(c, err)
	var (
		notFound  modalsdk.NotFoundError
		exists    modalsdk.AlreadyExistsError
		invalid   modalsdk.InvalidError
		exhausted modalsdk.ResourceExhaustedError
		conflict  modalsdk.ConflictError
		timeout   modalsdk.TimeoutError
	)
	var kind error
	switch {
	case errors.As(err, &notFound):
		kind = providers.ErrNotFound
	case errors.As(err, &exists), errors.As(err, &invalid):
		kind = providers.ErrRefused
	case errors.As(err, &exhausted):
		kind = providers.ErrCapacity
	case errors.As(err, &conflict), errors.As(err, &timeout), errors.Is(err, context.DeadlineExceeded):
		kind = providers.ErrUnavailable
	default:
		if s, ok := status.FromError(cause(err)); ok {
			kind = kinds[s.Code()]
		}
	}
	if kind == nil {
		kind = providers.ErrUnavailable
	}
	return fmt.Errorf("%w: %s", kind, msg)
}

// scrub returns err's message without the connection's token.
func (m *Modal) scrub(c map[string]string, err error) string {
	msg := err.Error()
	for _, k := range []string{CredTokenSecret, CredTokenID} {
		if v := c[k]; v != "" {
			msg = strings.ReplaceAll(msg, v, "["+k+"]")
		}
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// infoAndAbove passes on the SDK's records from Info up: its debug lines
// follow every call.
type infoAndAbove struct{ slog.Handler }

func (h infoAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.Handler.Enabled(ctx, l)
}

func (h infoAndAbove) WithAttrs(as []slog.Attr) slog.Handler {
	return infoAndAbove{h.Handler.WithAttrs(as)}
}

func (h infoAndAbove) WithGroup(name string) slog.Handler {
	return infoAndAbove{h.Handler.WithGroup(name)}
}

var (
	_ providers.Provider          = (*Modal)(nil)
	_ providers.Lister            = (*Modal)(nil)
	_ providers.Transporter       = (*Modal)(nil)
	_ providers.CredentialChecker = (*Modal)(nil)
	_ providers.Describer         = (*Modal)(nil)
)
