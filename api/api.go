package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Agent is an AI agent that uses computer tools.
type Agent struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Workspace string    `json:"workspace"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateAgentRequest is the body of POST /v1/agents. ID and Workspace may
// be empty: the supervisor picks an id, and the workspace "default".
type CreateAgentRequest struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Workspace string `json:"workspace,omitempty"`
}

// ConnectRequest is the body of POST /v1/computers. An empty Provider or
// Image, and zero LeaseSeconds or DailySeconds, leave the supervisor's
// defaults.
type ConnectRequest struct {
	Agent        string            `json:"agent"`
	Provider     string            `json:"provider,omitempty"`
	Credentials  map[string]string `json:"credentials,omitempty"`
	LeaseSeconds int               `json:"leaseSeconds,omitempty"`
	DailySeconds int               `json:"dailySeconds,omitempty"`
	Image        string            `json:"image,omitempty"` // "headless" or "desktop"
	// Persistence is PersistenceNone (the default: every session starts
	// empty), PersistenceHome (the home folder is kept across sessions) or
	// PersistenceMemory (the processes too, where the provider can).
	Persistence string `json:"persistence,omitempty"`
	// IdleSleepSeconds and MaxCheckpoints apply with PersistenceHome and
	// PersistenceMemory; zero leaves the defaults.
	IdleSleepSeconds int `json:"idleSleepSeconds,omitempty"`
	MaxCheckpoints   int `json:"maxCheckpoints,omitempty"`
	// BrowserRecording has a hosted browser provider record each session
	// (a replay kept at the provider); off by default.
	BrowserRecording bool `json:"browserRecording,omitempty"`
	// BrowserProxyCountry routes a hosted browser's traffic through the
	// provider's proxy in that country (a lowercase ISO 3166-1 alpha-2
	// code such as us or de); empty, the browser uses no proxy.
	BrowserProxyCountry string `json:"browserProxyCountry,omitempty"`
	// DesktopUsers is how many holders may use the desktop tools of a
	// desktop computer at once, 1..MaxDesktopUsers (0: the default, 1).
	// BrowserEvaluate allows browser_evaluate, which runs any script in
	// the page the agent's browser shows; off by default.
	BrowserEvaluate bool `json:"browserEvaluate,omitempty"`
	DesktopUsers    int  `json:"desktopUsers,omitempty"`
}

// Persistence of a connection's computers.
const (
	// PersistenceNone: a session starts empty and everything is
	// discarded at its end.
	PersistenceNone = "none"
	// PersistenceHome: the end of a session (stop, expiry, idle sleep)
	// archives the home folder to the supervisor's object store before the
	// machine is removed; the next start makes a machine from the image
	// configured then and restores the home before any tool call is
	// answered. Files are kept; processes are not.
	PersistenceHome = "home"
	// PersistenceMemory: as PersistenceHome, and a sleep also suspends the
	// machine (its memory and processes checkpointed to the provider's
	// disk) instead of removing it; the next start resumes it, with every
	// process where it was. Only providers that can checkpoint a machine
	// take it (the docker provider under gVisor). When the suspended
	// machine cannot be resumed (it was removed, the image changed, a
	// checkpoint of the home was asked for) the start wakes from the home
	// archive as with PersistenceHome: files kept, processes not.
	PersistenceMemory = "memory"
)

// KeepsHome reports whether computers of a connection with persistence p
// keep their home folder across sessions.
func KeepsHome(p string) bool { return p == PersistenceHome || p == PersistenceMemory }

// Limits of persistent connections.
const (
	DefaultIdleSleepSeconds = 600
	MinIdleSleepSeconds     = 60
	MaxIdleSleepSeconds     = 3600
	DefaultMaxCheckpoints   = 10
	MaxMaxCheckpoints       = 100
	// MaxCheckpointNameChars bounds a checkpoint's name, which is made of
	// letters, digits, '.', '_' and '-' and starts with a letter or digit.
	MaxCheckpointNameChars = 64
)

// Connection attaches a provider to an agent. Its credentials are never
// returned.
type Connection struct {
	Agent        string `json:"agent"`
	Provider     string `json:"provider"`
	Image        string `json:"image"`
	LeaseSeconds int    `json:"leaseSeconds"`
	DailySeconds int    `json:"dailySeconds"`
	Persistence  string `json:"persistence"`
	// IdleSleepSeconds and MaxCheckpoints are set when KeepsHome.
	IdleSleepSeconds int `json:"idleSleepSeconds,omitempty"`
	MaxCheckpoints   int `json:"maxCheckpoints,omitempty"`
	// BrowserRecording and BrowserProxyCountry are set on hosted browser
	// connections that ask for them; absent, sessions are not recorded and
	// use no proxy.
	BrowserRecording    bool   `json:"browserRecording,omitempty"`
	BrowserProxyCountry string `json:"browserProxyCountry,omitempty"`
	// DesktopUsers is how many holders may use the desktop tools at once.
	DesktopUsers int `json:"desktopUsers"`
	// BrowserEvaluate is set on connections that allow browser_evaluate.
	BrowserEvaluate bool      `json:"browserEvaluate,omitempty"`
	CreatedAt       time.Time `json:"createdAt"`
}

// Session states.
const (
	StateStarting      = "starting"
	StateRunning       = "running"
	StateStopping      = "stopping"
	StateStopped       = "stopped"
	StateExpired       = "expired"
	StateUncertain     = "uncertain"
	StateCleanupFailed = "cleanup_failed"
)

// Session is one running computer of a connection.
type Session struct {
	ID               string    `json:"id"`
	State            string    `json:"state"`
	Provider         string    `json:"provider"`
	Image            string    `json:"image"`
	StartedAt        time.Time `json:"startedAt"`
	ExpiresAt        time.Time `json:"expiresAt"`
	RemainingSeconds int       `json:"remainingSeconds"`
	// Message explains a state that needs a person, such as uncertain or
	// cleanup_failed.
	Message string `json:"message,omitempty"`
	// Browser is set for a hosted browser session: its CDP and live-view
	// URLs (such a session has no shell or files).
	Browser *Browser `json:"browser,omitempty"`
}

// Live reports whether the session holds the agent's computer: starting,
// running or uncertain. A start that answers a session that is not live
// started nothing.
func (s *Session) Live() bool {
	return s.State == StateStarting || s.State == StateRunning || s.State == StateUncertain
}

// Browser is what a hosted browser session offers in place of a computer.
type Browser struct {
	CDPURL      string `json:"cdpUrl"`
	LiveViewURL string `json:"liveViewUrl,omitempty"`
}

// Budget is a connection's time budget for one UTC day.
type Budget struct {
	Day             string    `json:"day"` // YYYY-MM-DD
	DailySeconds    int       `json:"dailySeconds"`
	UsedSeconds     int       `json:"usedSeconds"`
	ReservedSeconds int       `json:"reservedSeconds"`
	LeftSeconds     int       `json:"leftSeconds"`
	ResetsAt        time.Time `json:"resetsAt"`
}

// StateSleeping is the ComputerStatus state of a persistent computer with
// no live session and a home archive to wake from.
const StateSleeping = "sleeping"

// ComputerStatus is an agent's connection, its current session (nil when
// there is none) and today's budget. State is the live session's state,
// StateSleeping, or empty when there is neither. Archive is, for a
// persistent connection, the home's latest archive (the one the next start
// wakes from), nil before the first.
type ComputerStatus struct {
	Connection Connection `json:"connection"`
	State      string     `json:"state,omitempty"`
	Session    *Session   `json:"session"`
	Archive    *Archive   `json:"archive,omitempty"`
	Budget     Budget     `json:"budget"`
}

// Archive describes a stored archive of a persistent computer's home: its
// sleep archive (no Name) or a named checkpoint. Bytes is the archive's
// size (tar + zstd, before encryption); Image the image it was made on.
type Archive struct {
	Name      string    `json:"name,omitempty"`
	Bytes     int64     `json:"bytes"`
	CreatedAt time.Time `json:"createdAt"`
	Image     string    `json:"image"`
	// Suspended is set on the last sleep of a PersistenceMemory computer
	// whose machine is kept suspended: the next start resumes its
	// processes.
	Suspended bool `json:"suspended,omitempty"`
}

// StartRequest is the optional body of start. Checkpoint names the
// checkpoint a persistent computer wakes from in place of its last sleep.
type StartRequest struct {
	Checkpoint string `json:"checkpoint,omitempty"`
}

// CheckpointRequest is the body of POST .../computer/checkpoints.
type CheckpointRequest struct {
	Name string `json:"name"`
}

// Checkpoints is the answer of GET .../computer/checkpoints, oldest first.
type Checkpoints struct {
	Checkpoints []Archive `json:"checkpoints"`
}

// ExecRequest is the body of computer_exec. A zero TimeoutSeconds leaves the
// supervisor's default.
type ExecRequest struct {
	Command        string `json:"command"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty"`
}

// ExecResult is the outcome of computer_exec. Truncated marks stdout or
// stderr cut at the supervisor's bound. Uncertain means the result was lost
// (the computer or the link died mid-call): the command may or may not have
// run, and the computer should be inspected before anything that could
// repeat a side effect. Advice, when set, says what to do next.
type ExecResult struct {
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timedOut"`
	Uncertain bool   `json:"uncertain"`
	Advice    string `json:"advice,omitempty"`
}

// ReadFileRequest is the body of computer_read_file.
type ReadFileRequest struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
}

// ReadFileResult is a part of a UTF-8 file. When Truncated is set, the rest
// starts at NextOffset.
type ReadFileResult struct {
	Content    string `json:"content"`
	Truncated  bool   `json:"truncated"`
	NextOffset int64  `json:"nextOffset,omitempty"`
}

// WriteFileRequest is the body of computer_write_file.
type WriteFileRequest struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// WriteFileResult is what the computer verified on disk after a write: its
// size in bytes and its hex SHA-256.
type WriteFileResult struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Usage groupings.
const (
	ByProvider  = "provider"
	ByWorkspace = "workspace"
)

// UsageRequest selects a usage report. Zero From and To leave the
// supervisor's defaults; an empty By means by provider.
type UsageRequest struct {
	By   string
	From time.Time
	To   time.Time
}

// Usage is session time per provider or per workspace in [From, To), and
// the archive storage of persistent computers now.
type Usage struct {
	By     string      `json:"by"`
	From   time.Time   `json:"from"`
	To     time.Time   `json:"to"`
	Rows   []UsageRow  `json:"rows"`
	Stored []StoredRow `json:"stored"`
}

// StoredRow is the archive storage of one agent: the bytes of its sleep
// archive and checkpoints in the object store (before encryption).
type StoredRow struct {
	Agent     string `json:"agent"`
	Workspace string `json:"workspace"`
	Bytes     int64  `json:"bytes"`
	Archives  int64  `json:"archives"`
}

// UsageRow is the session time of one provider or workspace.
type UsageRow struct {
	Key      string `json:"key"`
	Seconds  int64  `json:"seconds"`
	Sessions int64  `json:"sessions"`
}

// confirmCleanupRequest is the body of confirm-cleanup.
type confirmCleanupRequest struct {
	ProviderCleanupConfirmed bool `json:"providerCleanupConfirmed"`
}

// CreateAgent creates an agent.
func (c *Client) CreateAgent(ctx context.Context, r CreateAgentRequest) (*Agent, error) {
	var out Agent
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/agents", in: r, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Connect attaches a provider to an agent. An agent has at most one
// connection; a second is refused with a 409 APIError.
func (c *Client) Connect(ctx context.Context, r ConnectRequest) (*Connection, error) {
	var out Connection
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/computers", in: r, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Status returns the agent's connection, session and budget.
func (c *Client) Status(ctx context.Context, agent string) (*ComputerStatus, error) {
	var out ComputerStatus
	if err := c.agentCall(ctx, http.MethodGet, agent, "", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Computer is one line of the computer list.
type Computer struct {
	Agent    string   `json:"agent"`
	Provider string   `json:"provider"`
	Image    string   `json:"image"`
	Session  *Session `json:"session"`
}

// Computers lists every agent's computer connection with its live session.
func (c *Client) Computers(ctx context.Context) ([]Computer, error) {
	var out struct {
		Computers []Computer `json:"computers"`
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/computers", out: &out, repeatable: true}); err != nil {
		return nil, err
	}
	return out.Computers, nil
}

// Disconnect stops the agent's session, then removes its connection and
// credentials.
func (c *Client) Disconnect(ctx context.Context, agent string) error {
	return c.agentCall(ctx, http.MethodDelete, agent, "", nil, nil)
}

// Start starts the agent's computer, or returns the session already running.
func (c *Client) Start(ctx context.Context, agent string) (*Session, error) {
	return c.sessionCall(ctx, agent, "/start", nil)
}

// StartFrom starts the agent's persistent computer from one of its
// checkpoints.
func (c *Client) StartFrom(ctx context.Context, agent, checkpoint string) (*Session, error) {
	return c.sessionCall(ctx, agent, "/start", StartRequest{Checkpoint: checkpoint})
}

// Checkpoint archives the home of the agent's running persistent computer
// as a named checkpoint; the computer keeps running.
func (c *Client) Checkpoint(ctx context.Context, agent, name string) (*Archive, error) {
	var out Archive
	if err := c.agentCall(ctx, http.MethodPost, agent, "/checkpoints", CheckpointRequest{Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Checkpoints lists the agent's checkpoints, oldest first.
func (c *Client) Checkpoints(ctx context.Context, agent string) ([]Archive, error) {
	var out Checkpoints
	if err := c.agentCall(ctx, http.MethodGet, agent, "/checkpoints", nil, &out); err != nil {
		return nil, err
	}
	return out.Checkpoints, nil
}

// DeleteCheckpoint deletes one of the agent's checkpoints.
func (c *Client) DeleteCheckpoint(ctx context.Context, agent, name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("client: checkpoint name %q", name)
	}
	return c.agentCall(ctx, http.MethodDelete, agent, "/checkpoints/"+url.PathEscape(name), nil, nil)
}

// Exec runs a shell command on the agent's computer.
func (c *Client) Exec(ctx context.Context, agent string, r ExecRequest) (*ExecResult, error) {
	var out ExecResult
	if err := c.agentCall(ctx, http.MethodPost, agent, "/exec", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadFile reads a UTF-8 file, or the part of it from r.Offset on, from the
// agent's computer.
func (c *Client) ReadFile(ctx context.Context, agent string, r ReadFileRequest) (*ReadFileResult, error) {
	var out ReadFileResult
	if err := c.agentCall(ctx, http.MethodPost, agent, "/read_file", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WriteFile writes a UTF-8 file on the agent's computer and returns what
// the computer verified on disk.
func (c *Client) WriteFile(ctx context.Context, agent string, r WriteFileRequest) (*WriteFileResult, error) {
	var out WriteFileResult
	if err := c.agentCall(ctx, http.MethodPost, agent, "/write_file", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stop stops and discards the agent's session, and returns it as it ended.
func (c *Client) Stop(ctx context.Context, agent string) (*Session, error) {
	return c.sessionCall(ctx, agent, "/stop", nil)
}

// ConfirmCleanup tells the supervisor that a person has removed, at the
// provider, any machine left by the agent's uncertain session or by one
// whose cleanup keeps failing, so that the session can be closed. It returns
// the closed session, or nil when the supervisor answers without one.
func (c *Client) ConfirmCleanup(ctx context.Context, agent string) (*Session, error) {
	return c.sessionCall(ctx, agent, "/confirm-cleanup", confirmCleanupRequest{ProviderCleanupConfirmed: true})
}

// Usage returns session time per provider or per workspace.
func (c *Client) Usage(ctx context.Context, r UsageRequest) (*Usage, error) {
	q := url.Values{}
	if r.By != "" {
		q.Set("by", r.By)
	}
	if !r.From.IsZero() {
		q.Set("from", r.From.UTC().Format(time.RFC3339))
	}
	if !r.To.IsZero() {
		q.Set("to", r.To.UTC().Format(time.RFC3339))
	}
	var out Usage
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/usage", query: q, out: &out, repeatable: true})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Health returns nil when the supervisor answers that it can serve.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, request{method: http.MethodGet, path: "/healthz", noAuth: true, repeatable: true})
}

// sessionCall posts to one of the agent's computer endpoints that answer a
// session.
func (c *Client) sessionCall(ctx context.Context, agent, suffix string, in any) (*Session, error) {
	var out *Session
	if err := c.agentCall(ctx, http.MethodPost, agent, suffix, in, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// agentCall calls /v1/agents/{agent}/computer plus suffix. Every one of
// these calls is safe to repeat: reads by nature, tool calls because the
// supervisor deduplicates them by their Idempotency-Key, and disconnecting
// twice leaves the same state as once.
func (c *Client) agentCall(ctx context.Context, method, agent, suffix string, in, out any) error {
	if agent == "" || agent == "." || agent == ".." {
		return ErrAgentID
	}
	return c.do(ctx, request{
		method:     method,
		path:       "/v1/agents/" + url.PathEscape(agent) + "/computer" + suffix,
		in:         in,
		out:        out,
		keyed:      method != http.MethodGet,
		repeatable: true,
	})
}
