// Package supervisor is Berth's control plane: it connects agents to
// providers, starts and stops their computers within leases and daily
// budgets, and serves the five computer tools. The HTTP API lives in
// supervisor/apiserver; state lives behind supervisor/store.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// Limits of the agent tools and connections (SPEC sections 2 and 3).
const (
	MinLeaseSeconds     = 60
	MaxLeaseSeconds     = 900
	DefaultLeaseSeconds = 900
	MaxDailySeconds     = 86400
	DefaultDailySeconds = 3600

	MaxExecTimeoutSeconds     = 120
	DefaultExecTimeoutSeconds = 60
	MaxCommandChars           = 100000
	ExecOutputBytes           = 16 << 10 // per stream, head and tail kept
	MaxReadChars              = 24000
	MaxWriteChars             = 16000
	MaxPathChars              = 4096
)

// Config wires a Service.
type Config struct {
	Store store.Store
	// Providers are the configured providers by id.
	Providers map[string]providers.Provider
	// DefaultProvider is used when a connection names none; it must be
	// one of Providers.
	DefaultProvider string
	Box             *secrets.Box
	Tokens          *token.Deriver
	Clock           clock.Clock
	Logger          *slog.Logger
	// HTTPClient reaches computerd; providers that are Transporters supply
	// their own transport.
	HTTPClient *http.Client
	// ComputerEnv is added to every computer's environment.
	ComputerEnv map[string]string
	// EgressAddr is the egress proxy's address as computers reach it
	// (host:port). When set, each computer gets HTTP_PROXY and HTTPS_PROXY
	// (and their lower-case forms) with its own credentials, and an empty
	// NO_PROXY.
	EgressAddr string
	// ReadyTimeout bounds the wait for a new computer's daemon (default 60 s).
	ReadyTimeout time.Duration
	// InstanceID names this supervisor process among those sharing the
	// store (default: random).
	InstanceID string
	// RelayURL is the websocket URL lenders' agents connect to, given to
	// each agent when it pairs (empty when no relay is configured).
	RelayURL string
	// Objects keeps the archives of persistent computers, sealed before
	// they leave the process (objstore.Encrypted). Without it, connections
	// with persistence "home" are refused.
	Objects objstore.Store
	// ArchiveTimeout bounds one archive or restore (default 1 h), and
	// MaxArchiveBytes one archive's size (default 64 GiB).
	ArchiveTimeout  time.Duration
	MaxArchiveBytes int64
	// PreviewDomain, when set (PREVIEW_DOMAIN, checked by
	// CheckPreviewDomain), gives each port preview a host of its own
	// under it, in place of a path under the supervisor's host.
	PreviewDomain string
}

// Service carries out the supervisor's operations; REST and MCP both call it.
// It keeps agents, connections and sessions (their starts, ends, budgets
// and tools) itself, and composes the parts that each do one other job,
// each with its own state and what it needs passed in at New.
type Service struct {
	cfg  Config
	st   store.Store
	clk  clock.Clock
	log  *slog.Logger
	http *http.Client

	calls      *Calls         // idempotent tool calls (calls.go)
	pairing    *Pairing       // lenders' agents pairing (pairing.go)
	egress     *EgressAuth    // which computers may use the egress proxy (egressauth.go)
	pool       *Pool          // this instance's part of the warm pools (pool.go)
	reconciler *Reconciler    // matches machines to sessions after a restart (reconcile.go)
	terms      terminals      // this process's open terminals (terminal.go)
	hosted     hostedBrowsers // this process's connections to hosted browsers (browser.go)

	reapMu    sync.Mutex // one reaper pass at a time in this process
	lastPurge time.Time  // of call records and viewer seats, under reapMu
	instance  string

	depMu      sync.Mutex
	deployment string

	waking    sync.Map  // session id -> *sync.Mutex, for wakes (persist.go)
	touched   sync.Map  // session id -> time of its last tool call recorded here (persist.go)
	previews  sync.Map  // session id -> cachedSession (preview.go)
	lastSweep time.Time // of the archive objects, under reapMu
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Box == nil || cfg.Tokens == nil {
		return nil, errors.New("supervisor: Store, Box and Tokens are required")
	}
	if cfg.DefaultProvider == "" {
		cfg.DefaultProvider = "docker"
	}
	if _, ok := cfg.Providers[cfg.DefaultProvider]; !ok {
		return nil, fmt.Errorf("supervisor: DEFAULT_PROVIDER %q is not configured (configured: %s)",
			cfg.DefaultProvider, strings.Join(slices.Sorted(maps.Keys(cfg.Providers)), ", "))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = newID("i_")
	}
	if cfg.ArchiveTimeout <= 0 {
		cfg.ArchiveTimeout = defaultArchiveTimeout
	}
	if cfg.MaxArchiveBytes <= 0 {
		cfg.MaxArchiveBytes = defaultMaxArchiveBytes
	}
	s := &Service{
		cfg: cfg, st: cfg.Store, clk: cfg.Clock, http: cfg.HTTPClient, instance: cfg.InstanceID,
		log: cfg.Logger.With("component", "supervisor", "instance", cfg.InstanceID),
	}
	s.calls = NewCalls(CallsOptions{Store: s.st, Clock: s.clk, Logger: s.log, Instance: s.instance})
	s.pairing = NewPairing(PairingOptions{Store: s.st, Clock: s.clk, Logger: s.log, RelayURL: cfg.RelayURL})
	s.egress = NewEgressAuth(EgressAuthOptions{Store: s.st, Clock: s.clk, Logger: s.log, Tokens: cfg.Tokens})
	s.pool = NewPool(PoolOptions{
		Store: s.st, Clock: s.clk, Logger: s.log, Providers: cfg.Providers, HTTPClient: s.http,
		Instance: s.instance, Deployment: s.Deployment, Machines: s.listMachines,
		DesktopEnv: egress.WithoutProxyEnv(cfg.ComputerEnv),
	})
	s.reconciler = NewReconciler(ReconcilerOptions{
		Store: s.st, Clock: s.clk, Logger: s.log, Providers: cfg.Providers, Instance: s.instance,
		Machines: s.listMachines, Accounts: s.credentialSets,
		Claim: s.claim, End: s.endSession, Adopt: s.adopt,
	})
	return s, nil
}

// Instance returns this supervisor's instance id.
func (s *Service) Instance() string { return s.instance }

// CloseIdleConnections drops the kept-alive connections to computers,
// when the service is shut down.
func (s *Service) CloseIdleConnections() { s.http.CloseIdleConnections() }

// Deployment returns the id of the deployment: one per store, shared by
// every supervisor on it, and put on every machine as a label.
func (s *Service) Deployment(ctx context.Context) (string, error) {
	s.depMu.Lock()
	defer s.depMu.Unlock()
	if s.deployment != "" {
		return s.deployment, nil
	}
	id, err := s.st.Meta(ctx, "deployment_id", newID("d_"))
	if err != nil {
		return "", fmt.Errorf("deployment id: %w", err)
	}
	s.deployment = id
	return id, nil
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func newID(prefix string) string {
	b := make([]byte, 10)
	rand.Read(b)
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// CreateAgentRequest is the body of POST /v1/agents.
type CreateAgentRequest = api.CreateAgentRequest

// CreateAgent registers an agent.
func (s *Service) CreateAgent(ctx context.Context, r CreateAgentRequest) (store.Agent, error) {
	if r.ID == "" {
		r.ID = newID("ag_")
	}
	if !idRE.MatchString(r.ID) {
		return store.Agent{}, badRequest("id: %q must be 1 to 64 letters, digits, '.', '_' or '-'", r.ID)
	}
	if r.Name = strings.TrimSpace(r.Name); r.Name == "" || len(r.Name) > 200 {
		return store.Agent{}, badRequest("name: required, at most 200 characters")
	}
	if r.Workspace == "" {
		r.Workspace = "default"
	}
	if !idRE.MatchString(r.Workspace) {
		return store.Agent{}, badRequest("workspace: %q must be 1 to 64 letters, digits, '.', '_' or '-'", r.Workspace)
	}
	a := store.Agent{ID: r.ID, Name: r.Name, Workspace: r.Workspace, CreatedAt: s.clk.Now().UTC()}
	if err := s.st.CreateAgent(ctx, a); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return a, errorf(http.StatusConflict, CodeConflict, "agent %q already exists", r.ID)
		}
		return a, fmt.Errorf("create agent %s: %w", r.ID, err)
	}
	return a, nil
}

// ConnectRequest is the body of POST /v1/computers.
type ConnectRequest struct {
	Agent        string            `json:"agent"`
	Provider     string            `json:"provider,omitempty"`
	Credentials  map[string]string `json:"credentials,omitempty"`
	LeaseSeconds *int              `json:"leaseSeconds,omitempty"`
	DailySeconds *int              `json:"dailySeconds,omitempty"`
	Image        string            `json:"image,omitempty"`
	// Persistence, IdleSleepSeconds and MaxCheckpoints: see api.ConnectRequest.
	Persistence      string `json:"persistence,omitempty"`
	IdleSleepSeconds *int   `json:"idleSleepSeconds,omitempty"`
	MaxCheckpoints   *int   `json:"maxCheckpoints,omitempty"`
	// BrowserRecording and BrowserProxyCountry: see api.ConnectRequest.
	BrowserRecording    bool   `json:"browserRecording,omitempty"`
	BrowserProxyCountry string `json:"browserProxyCountry,omitempty"`
	// DesktopUsers: see api.ConnectRequest; only with image "desktop".
	DesktopUsers *int `json:"desktopUsers,omitempty"`
	// BrowserEvaluate: see api.ConnectRequest.
	BrowserEvaluate bool `json:"browserEvaluate,omitempty"`
}

// Connect attaches a provider to an agent.
func (s *Service) Connect(ctx context.Context, r ConnectRequest) (store.Connection, error) {
	var c store.Connection
	if r.Agent == "" {
		return c, badRequest("agent: required")
	}
	if r.Provider == "" {
		r.Provider = s.cfg.DefaultProvider
	}
	p, ok := s.cfg.Providers[r.Provider]
	if !ok {
		return c, badRequest("provider: %q is not configured (configured: %s)", r.Provider, strings.Join(slices.Sorted(maps.Keys(s.cfg.Providers)), ", "))
	}
	lease := DefaultLeaseSeconds
	if r.LeaseSeconds != nil {
		lease = *r.LeaseSeconds
	}
	daily := max(DefaultDailySeconds, lease)
	if r.DailySeconds != nil {
		daily = *r.DailySeconds
	}
	if err := checkLimits(lease, daily); err != nil {
		return c, err
	}
	if r.Image == "" {
		r.Image = providers.ImageHeadless
	}
	if r.Image != providers.ImageHeadless && r.Image != providers.ImageDesktop {
		return c, badRequest("image: %q must be %q or %q", r.Image, providers.ImageHeadless, providers.ImageDesktop)
	}
	if err := s.persistence(ctx, &r, r.Provider); err != nil {
		return c, err
	}
	if err := s.browserOptions(r); err != nil {
		return c, err
	}
	users, err := desktopUsers(r)
	if err != nil {
		return c, err
	}
	if cc, ok := p.(providers.CredentialChecker); ok {
		if err := cc.CheckCredentials(r.Credentials); err != nil {
			return c, badRequest("credentials: %v", err)
		}
	} else if len(r.Credentials) > 0 {
		return c, badRequest("credentials: the %s provider takes none", r.Provider)
	}
	if _, err := s.st.GetAgent(ctx, r.Agent); err != nil {
		return c, s.agentErr(r.Agent, err)
	}
	raw, err := json.Marshal(r.Credentials)
	if err != nil {
		return c, err
	}
	sealed, err := s.cfg.Box.Seal(raw, credentialsAD(r.Agent))
	if err != nil {
		return c, err
	}
	c = store.Connection{
		AgentID: r.Agent, Provider: r.Provider, Image: r.Image, LeaseSeconds: lease, DailySeconds: daily,
		Persistence: r.Persistence, CreatedAt: s.clk.Now().UTC(), Credentials: []byte(sealed),
		BrowserRecording: r.BrowserRecording, BrowserProxyCountry: r.BrowserProxyCountry, DesktopUsers: users,
		BrowserEvaluate: r.BrowserEvaluate,
	}
	if api.KeepsHome(r.Persistence) {
		c.IdleSleepSeconds, c.MaxCheckpoints = *r.IdleSleepSeconds, *r.MaxCheckpoints
	}
	if err := s.st.CreateConnection(ctx, c); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return c, errorf(http.StatusConflict, CodeConflict, "agent %q already has a computer connection; DELETE /v1/agents/%s/computer first", r.Agent, r.Agent)
		}
		return c, fmt.Errorf("connect agent %s: %w", r.Agent, err)
	}
	s.log.Info("connected", "agent", r.Agent, "provider", r.Provider, "lease", lease, "daily", daily, "persistence", r.Persistence)
	return c, nil
}

// checkLimits checks a connection's lease and daily budget.
func checkLimits(lease, daily int) error {
	if lease < MinLeaseSeconds || lease > MaxLeaseSeconds {
		return limitf("leaseSeconds: %d is outside %d..%d", lease, MinLeaseSeconds, MaxLeaseSeconds)
	}
	if daily < lease || daily > MaxDailySeconds {
		return limitf("dailySeconds: %d is outside leaseSeconds (%d)..%d", daily, lease, MaxDailySeconds)
	}
	return nil
}

func credentialsAD(agent string) string { return "connection/" + agent }

// computerEnv is the environment of a new computer of provider: the
// configured variables, then, when provider's computers reach the egress
// proxy (providers.EgressUser), the proxy with the computer's own
// credentials. Other computers never see them.
func (s *Service) computerEnv(provider, computerID string) map[string]string {
	if s.cfg.EgressAddr == "" || !providers.UsesSupervisorEgress(s.cfg.Providers[provider]) {
		env := make(map[string]string, len(s.cfg.ComputerEnv))
		maps.Copy(env, s.cfg.ComputerEnv)
		return env
	}
	return egress.ProxyEnv(s.cfg.ComputerEnv, s.cfg.EgressAddr, computerID, s.cfg.Tokens.Derive(token.Egress, computerID))
}

func (s *Service) agentErr(agent string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "agent %q does not exist", agent)
	}
	return err
}

// connection returns the agent's connection, or a 404 that says what is missing.
func (s *Service) connection(ctx context.Context, agent string) (store.Connection, error) {
	c, err := s.st.GetConnection(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		if _, aerr := s.st.GetAgent(ctx, agent); aerr != nil {
			return c, s.agentErr(agent, aerr)
		}
		return c, errorf(http.StatusNotFound, CodeNotFound, "agent %q has no computer connection; POST /v1/computers first", agent)
	}
	return c, err
}

// SessionView is a session as the API shows it.
type SessionView = api.Session

// BrowserView is what a hosted browser session offers in place of a shell
// and files: its DevTools (CDP) URL and its live view.
type BrowserView = api.Browser

// BrowserSession is a provider whose sessions are hosted browsers, not
// computers: exec and the file tools are refused on them
// (CodeBrowserSession), and the session view carries the browser's URLs.
type BrowserSession interface {
	BrowserURLs(m providers.Machine) (cdpURL, liveViewURL string)
}

func (s *Service) view(x store.Session) SessionView {
	v := SessionView{ID: x.ID, State: x.State, Provider: x.Provider, Image: x.Image, StartedAt: x.CreatedAt, ExpiresAt: x.ExpiresAt}
	if store.Live(x.State) {
		v.RemainingSeconds = max(int(x.ExpiresAt.Sub(s.clk.Now()).Seconds()), 0)
		if b, ok := s.cfg.Providers[x.Provider].(BrowserSession); ok && x.State == store.StateRunning {
			if cdp, live := b.BrowserURLs(machineOf(x)); cdp != "" {
				v.Browser = &BrowserView{CDPURL: cdp, LiveViewURL: live}
			}
		}
	}
	switch x.State {
	case store.StateUncertain:
		v.Message = "the provider may have created a machine whose id was lost; check the provider, remove any machine from this attempt, then POST confirm-cleanup with {\"providerCleanupConfirmed\": true}"
	case store.StateCleanupFailed:
		v.Message = "cleanup keeps failing (" + x.LastError + "); it is still retried; after removing the machine by hand, POST confirm-cleanup"
	}
	return v
}

// StatusView is the answer of GET /v1/agents/{agent}/computer.
type StatusView struct {
	Connection store.Connection `json:"connection"`
	State      string           `json:"state,omitempty"`
	Session    *SessionView     `json:"session"`
	Archive    *api.Archive     `json:"archive,omitempty"`
	Budget     store.Budget     `json:"budget"`
}

// Status returns the agent's connection, live session and today's budget.
func (s *Service) Status(ctx context.Context, agent string) (StatusView, error) {
	var out StatusView
	c, err := s.connection(ctx, agent)
	if err != nil {
		return out, err
	}
	out.Connection = c
	if x, err := s.st.LiveSession(ctx, agent); err == nil {
		v := s.view(x)
		out.Session = &v
		out.State = v.State
	} else if !errors.Is(err, store.ErrNotFound) {
		return out, err
	}
	if api.KeepsHome(c.Persistence) {
		a, err := s.st.GetArchive(ctx, agent, store.SleepArchive)
		switch {
		case err == nil:
			v := archiveView(a)
			if c.Persistence == api.PersistenceMemory {
				if _, v.Suspended, err = s.keeper(ctx, a); err != nil {
					return out, err
				}
			}
			out.Archive = &v
			if out.Session == nil {
				out.State = api.StateSleeping
			}
		case !errors.Is(err, store.ErrNotFound):
			return out, err
		}
	}
	out.Budget, err = s.st.Budget(ctx, agent, s.clk.Now())
	return out, err
}

// Disconnect stops the agent's session, then deletes the connection and its
// credentials. If the session's machine cannot be removed, the connection
// stays, so its credentials remain for the cleanup that is still owed.
func (s *Service) Disconnect(ctx context.Context, agent string) error {
	c, err := s.connection(ctx, agent)
	if err != nil {
		return err
	}
	x, err := s.st.LiveSession(ctx, agent)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	case x.State == store.StateUncertain:
		return errorf(http.StatusConflict, CodeUncertain, "session %s is uncertain; confirm its cleanup before disconnecting", x.ID)
	default:
		if x.Home == store.HomeLive {
			// Its archives go with the connection: none is made.
			y := x
			y.Home = ""
			if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
				return err
			}
		}
		if _, err := s.Stop(ctx, agent); err != nil {
			return err
		}
	}
	pending, err := s.st.SessionsByState(ctx, store.StateStopping, store.StateCleanupFailed)
	if err != nil {
		return err
	}
	for _, p := range pending {
		if p.AgentID == agent {
			return errorf(http.StatusConflict, CodeConflict, "session %s is still being cleaned up (%s); the connection and its credentials stay until it is done", p.ID, p.LastError)
		}
	}
	if err := s.dropSuspendedOf(ctx, c); err != nil {
		return err
	}
	if err := s.deleteArchives(ctx, agent); err != nil {
		return fmt.Errorf("delete the archives of %s: %w", agent, err)
	}
	if err := s.st.DeleteConnection(ctx, agent); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.log.Info("disconnected", "agent", agent)
	return nil
}

func (s *Service) provider(name string) (providers.Provider, error) {
	p, ok := s.cfg.Providers[name]
	if !ok {
		return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "provider %q is not configured on this supervisor", name)
	}
	return p, nil
}

// client returns a computerd client for a running session.
func (s *Service) client(ctx context.Context, x store.Session) (*computerd.Client, error) {
	hc, h, err := s.ComputerTransport(ctx, x)
	if err != nil {
		return nil, err
	}
	var opts []computerd.Option
	opts = append(opts, computerd.WithHTTPClient(hc))
	if len(h) > 0 {
		opts = append(opts, computerd.WithHeader(h))
	}
	return computerd.NewClient(x.Endpoint, s.cfg.Tokens.Derive(token.Computer, x.ComputerID), opts...), nil
}

// ComputerTransport returns the client and headers that reach session x's
// computerd: straight, or through its provider's transport with the
// connection's credentials (a lent machine's relay link, a tunnel, a
// hosted sandbox's proxy). Live view signals through it.
func (s *Service) ComputerTransport(ctx context.Context, x store.Session) (*http.Client, http.Header, error) {
	p, err := s.provider(x.Provider)
	if err != nil {
		return nil, nil, err
	}
	hc := s.http
	if t, ok := p.(providers.Transporter); ok {
		c, err := s.connection(ctx, x.AgentID)
		if err != nil {
			return nil, nil, err
		}
		creds, err := s.credentials(c)
		if err != nil {
			return nil, nil, err
		}
		hc = &http.Client{Transport: t.Transport(machineOf(x), creds)}
	}
	return hc, machineOf(x).Header, nil
}

func machineOf(x store.Session) providers.Machine {
	m := providers.Machine{ID: x.MachineID, Endpoint: x.Endpoint}
	if x.Header != "" {
		json.Unmarshal([]byte(x.Header), &m.Header)
	}
	return m
}

// DeleteWorkspace disconnects every agent of a workspace, then removes the
// agents. When a computer's cleanup is still pending it answers 409 and
// keeps that agent's connection (and so its credentials) until the cleanup
// is done; a retry finishes the job. Usage already recorded stays.
func (s *Service) DeleteWorkspace(ctx context.Context, workspace string) (int, error) {
	agents, err := s.st.AgentsIn(ctx, workspace)
	if err != nil {
		return 0, err
	}
	if len(agents) == 0 {
		return 0, errorf(http.StatusNotFound, CodeNotFound, "workspace %q has no agents", workspace)
	}
	var pending []string
	for _, a := range agents {
		if err := s.Disconnect(ctx, a.ID); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Status == http.StatusNotFound {
				// No connection: nothing to clean up.
			} else if errors.As(err, &e) && e.Status == http.StatusConflict {
				pending = append(pending, a.ID)
				continue
			} else {
				return 0, err
			}
		}
	}
	if len(pending) > 0 {
		return 0, errorf(http.StatusConflict, CodeConflict, "workspace %q: the computers of %s are still being cleaned up; their credentials stay until then; retry later", workspace, strings.Join(pending, ", "))
	}
	for _, a := range agents {
		if err := s.st.DeleteAgent(ctx, a.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
	}
	s.log.Info("workspace deleted", "workspace", workspace, "agents", len(agents))
	return len(agents), nil
}

// ComputerView is one line of the computer list: a connection and its live
// session, if any.
type ComputerView = api.Computer

// Computers lists every connection with its live session.
func (s *Service) Computers(ctx context.Context) ([]ComputerView, error) {
	conns, err := s.st.Connections(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ComputerView, 0, len(conns))
	for _, c := range conns {
		v := ComputerView{Agent: c.AgentID, Provider: c.Provider, Image: c.Image}
		if x, err := s.st.LiveSession(ctx, c.AgentID); err == nil {
			sv := s.view(x)
			v.Session = &sv
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
