package api

import (
	"context"
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
}

// Connection attaches a provider to an agent. Its credentials are never
// returned.
type Connection struct {
	Agent        string    `json:"agent"`
	Provider     string    `json:"provider"`
	Image        string    `json:"image"`
	LeaseSeconds int       `json:"leaseSeconds"`
	DailySeconds int       `json:"dailySeconds"`
	CreatedAt    time.Time `json:"createdAt"`
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

// ComputerStatus is an agent's connection, its current session (nil when
// there is none) and today's budget.
type ComputerStatus struct {
	Connection Connection `json:"connection"`
	Session    *Session   `json:"session"`
	Budget     Budget     `json:"budget"`
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

// Usage is session time per provider or per workspace in [From, To).
type Usage struct {
	By   string     `json:"by"`
	From time.Time  `json:"from"`
	To   time.Time  `json:"to"`
	Rows []UsageRow `json:"rows"`
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
