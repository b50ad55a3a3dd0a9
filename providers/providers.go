// Package providers defines where a Berth computer can run: the small
// Provider interface every place implements, the optional abilities a
// provider may add, and the registry the shipped providers add themselves to.
package providers

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/relay"
)

// Labels Berth puts on every machine it creates, so that reconciliation and
// uncertain-create recovery can find them.
const (
	LabelManaged  = "dev.berth.managed"  // always "true"
	LabelComputer = "dev.berth.computer" // the computer id
	LabelSession  = "dev.berth.session"  // the session id
	LabelAttempt  = "dev.berth.attempt"  // the create attempt id
	LabelAgent    = "dev.berth.agent"    // the agent id
	LabelPool     = "dev.berth.pool"     // "true" while waiting in a warm pool
	// LabelDeployment names the supervisor deployment (one database) that
	// made the machine; reconciliation only touches its own deployment's.
	LabelDeployment = "dev.berth.deployment"
)

// Image kinds a computer can be started from.
const (
	ImageHeadless = "headless"
	ImageDesktop  = "desktop"
)

// Spec says what computer to create.
type Spec struct {
	ComputerID string // Berth's id for the computer; names and labels derive from it
	SessionID  string
	AttemptID  string // unique per create call; a lost reply is searched for by it
	// Deployment is the id of the supervisor deployment creating it.
	Deployment string
	AgentID    string
	Image      string // ImageHeadless or ImageDesktop
	// TokenHash is the hex SHA-256 of the computer's token; computerd accepts
	// only the token that hashes to it.
	TokenHash string
	// Env is added to the computer's environment (proxy settings, TURN host).
	// It never carries provider credentials.
	Env map[string]string
	// Lease is the longest the computer may live; providers with a timeout of
	// their own set it as a fallback.
	Lease time.Duration
	// Credentials are the connection's decrypted credentials, for hosted
	// providers. They are never passed into the computer.
	Credentials map[string]string
	// BrowserRecording asks a hosted browser provider to record the
	// session (a replay kept at the provider); false, it must not.
	BrowserRecording bool
	// BrowserProxyCountry asks a hosted browser provider to route the
	// browser's traffic through its proxy in that country (a lowercase ISO
	// 3166-1 alpha-2 code); empty, through no proxy. Other providers
	// ignore both.
	BrowserProxyCountry string
}

// Labels returns the labels every machine of s carries.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		LabelManaged:    "true",
		LabelComputer:   s.ComputerID,
		LabelSession:    s.SessionID,
		LabelAttempt:    s.AttemptID,
		LabelAgent:      s.AgentID,
		LabelDeployment: s.Deployment,
	}
}

// Machine is a created computer as the supervisor reaches it.
type Machine struct {
	ID       string            `json:"id"`       // the provider's id for the machine
	Endpoint string            `json:"endpoint"` // base URL of computerd, e.g. http://10.1.2.3:7070
	Header   http.Header       `json:"header,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// Provider is a place where computers run.
type Provider interface {
	// Create starts a computer and returns once its machine exists and is
	// started; the caller waits for computerd's health itself. On an error
	// after the provider may have accepted the request, the caller treats
	// the attempt as uncertain and searches for it (see Lister).
	Create(ctx context.Context, spec Spec) (Machine, error)
	// Destroy removes the machine and everything created for it. Destroying
	// a machine that is already gone succeeds.
	Destroy(ctx context.Context, machineID string) error
}

// Lister is a provider that can list the machines carrying Berth's labels.
// The supervisor uses it to reconcile after a restart and to resolve
// uncertain creates by their attempt label.
type Lister interface {
	List(ctx context.Context) ([]Machine, error)
}

// GarbageCollector is a provider that removes, on its own, what any Berth
// process left behind past its time (the docker provider: every
// container, network and volume carries the time it expires). Whoever
// runs the provider runs this until it stops.
type GarbageCollector interface {
	RunGarbageCollector(ctx context.Context)
}

// Transporter is a provider whose machines are reached through something
// other than the supervisor's default HTTP transport (a relay, a tunnel).
// It gets the connection's decrypted credentials for each call, so that
// nothing secret needs to be kept with the machine.
type Transporter interface {
	Transport(m Machine, credentials map[string]string) http.RoundTripper
}

// Suspender is a provider that can keep a whole machine, its memory and
// its processes, while it is stopped (persistence "memory"): Suspend
// checkpoints the machine and stops it, after which it uses no CPU or
// memory, only disk; Resume starts it again from that checkpoint, with its
// processes where they were, and returns it as Create would. CanSuspend
// says whether the provider's machines can be suspended here, or why not.
// Suspending a machine already suspended succeeds; resuming one that is
// gone or has no checkpoint is ErrNotFound. Destroy removes a suspended
// machine like any other.
type Suspender interface {
	CanSuspend(ctx context.Context) error
	Suspend(ctx context.Context, machineID string) error
	Resume(ctx context.Context, machineID string) (Machine, error)
}

// Warmer is a provider that makes things ahead of time (the docker
// provider's network pool). Whoever serves with it calls Warm once before
// taking calls; what it starts runs in the background until ctx ends.
type Warmer interface {
	Warm(ctx context.Context)
}

// HostGuard is a provider whose computers run on the supervisor's own host
// (the docker provider) and which keeps them from reaching the services
// the host listens on. The supervisor opens to computers only the ports of
// its egress proxy and its live-view TURN relay, and closes them again
// when it stops.
type HostGuard interface {
	// GuardHost closes the host to computers, except for the egress
	// proxy's TCP port. It is idempotent.
	GuardHost(ctx context.Context, egressPort int) error
	// RemoveStaleOpenings closes the egress openings of ports nothing on
	// the host listens on any more (a supervisor that was killed) and
	// returns those ports.
	RemoveStaleOpenings(ctx context.Context) ([]int, error)
	// UnguardPort closes the egress opening GuardHost made for port.
	UnguardPort(ctx context.Context, port int) error
	// AllowTURN lets computers reach the TURN relay's port (UDP and TCP).
	AllowTURN(ctx context.Context, port int) error
	// UnguardTURN closes the opening AllowTURN made.
	UnguardTURN(ctx context.Context, port int) error
}

// LenderRelay is how a provider that runs computers on lent machines (the
// local provider) reaches the lending agents that lenders' machines run
// (`berth agent run`): through the relay they connect out to, running in
// the supervisor's own process (berth dev) or as its own (`berth relay`).
type LenderRelay interface {
	// Presence returns a lender's presence; ok is false for one the relay
	// has never seen.
	Presence(ctx context.Context, lenderID string) (p relay.Presence, ok bool, err error)
	// Lenders lists the lenders the relay has seen.
	Lenders(ctx context.Context) ([]relay.Presence, error)
	// Transport sends HTTP requests to the lender's agent.
	Transport(lenderID string) http.RoundTripper
}

// LenderLister is a provider that runs computers on lent machines and
// lists the lenders it reaches, with their presence (GET /v1/lenders).
type LenderLister interface {
	Lenders(ctx context.Context) ([]relay.Presence, error)
}

// Preparer is a provider that looks at its backend before the supervisor
// serves, and settles there how it runs (the docker provider chooses the
// runtime its computers run under). The supervisor calls Prepare once at
// start; an error stops it.
type Preparer interface {
	Prepare(ctx context.Context) error
}

// Fact is one thing a Prober found, such as the runtime computers run
// under.
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Prober is a provider that can say what it would find in its backend with
// the settings cfg gives, for `berth providers`. Like Describe, Probe must
// work on the zero value of the provider's type; it reports what it could
// not find in the facts rather than failing.
type Prober interface {
	Probe(ctx context.Context, cfg Config) []Fact
}

// WorkspaceLookup returns the workspace of the (AI) agent agentID.
type WorkspaceLookup func(ctx context.Context, agentID string) (string, error)

// WorkspaceUser is a provider that sends the workspace of the agent a
// computer is for along with its create (the local provider, for the
// lender's ledger). The supervisor gives it the lookup once its store is
// open, before the first Create.
type WorkspaceUser interface {
	SetWorkspaceLookup(WorkspaceLookup)
}

// Config is what a factory gets to build a provider.
type Config struct {
	// Getenv reads a setting by its SPEC name (COMPUTER_MEMORY_MB, ...).
	Getenv func(string) string
	Logger *slog.Logger
	// Relay, when set, is the relay to lending agents that the process
	// runs itself (berth dev); a provider that runs computers on lent
	// machines uses it instead of the relay its settings name.
	Relay LenderRelay
}

// Get returns the setting name, or def when it is unset.
func (c Config) Get(name, def string) string {
	if c.Getenv != nil {
		if v := c.Getenv(name); v != "" {
			return v
		}
	}
	return def
}

// CredentialChecker is a provider that validates a connection's credentials
// before they are stored. It does not call the provider: the first start
// proves them.
type CredentialChecker interface {
	CheckCredentials(map[string]string) error
}

type credentialsKey struct{}

// WithCredentials returns a context that carries a connection's decrypted
// credentials, for the calls that do not take a Spec (Destroy, List). The
// supervisor sets it; providers read it with CredentialsFrom.
func WithCredentials(ctx context.Context, credentials map[string]string) context.Context {
	return context.WithValue(ctx, credentialsKey{}, credentials)
}

// CredentialsFrom returns the credentials WithCredentials put in ctx, or nil.
func CredentialsFrom(ctx context.Context) map[string]string {
	c, _ := ctx.Value(credentialsKey{}).(map[string]string)
	return c
}

// Setting is one thing a provider is configured with: an environment
// setting of the supervisor, or a credential of a connection.
type Setting struct {
	Name     string // SETTING_NAME, or the credential's key (apiKey)
	Default  string // "" when none
	Required bool
	Secret   bool // never printed
	Help     string
}

// Description says what a provider is and what it is configured with.
type Description struct {
	Summary string
	// Settings are read from the supervisor's environment.
	Settings []Setting
	// Credentials are given with each connection (POST /v1/computers).
	Credentials []Setting
}

// Missing returns the required settings that getenv leaves unset.
func (d Description) Missing(getenv func(string) string) []string {
	var out []string
	for _, s := range d.Settings {
		if s.Required && (getenv == nil || getenv(s.Name) == "") {
			out = append(out, s.Name)
		}
	}
	return out
}

// Describer is a provider that describes its settings. Describe must work
// on the zero value of the provider's type: the registry keeps one (see
// Describe) so that `berth providers` can list providers it has not built.
type Describer interface {
	Describe() Description
}

// PoolMaxWait is the longest a computer or network made ahead of time
// (a warm pool's, a network holder) waits before its maker replaces it.
// Such a machine's lifetime covers that wait and one lease after it.
const PoolMaxWait = 30 * time.Minute

// MaxLease is the longest session lease (SPEC section 2: leaseSeconds up to
// 900).
const MaxLease = 15 * time.Minute

// LeaseGrace is how long past its lease a computer on a provider with no
// lifetime of its own ends itself, should no supervisor delete it.
const LeaseGrace = time.Minute

// ExpiresAt is when such a computer ends itself, LeaseGrace after a lease
// that starts at now, in the RFC 3339 form computerd reads from
// BERTH_EXPIRES_AT; "" when s has no lease.
func (s Spec) ExpiresAt(now time.Time) string {
	if s.Lease <= 0 {
		return ""
	}
	return now.Add(s.Lease + LeaseGrace).UTC().Format(time.RFC3339)
}

// HostedEnv returns env without the egress proxy's variables
// (egress.ProxyVars): a hosted
// computer uses its provider's own network, where the supervisor's egress
// proxy is neither reachable nor wanted (SPEC section 5).
func HostedEnv(env map[string]string) map[string]string {
	return egress.WithoutProxyEnv(env)
}
