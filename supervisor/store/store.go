// Package store defines the supervisor's state: agents, their computer
// connections, sessions with their budget reservations, and the queries the
// supervisor needs. Implementations live in subpackages (sqlstore, for the
// embedded SQLite and for PostgreSQL).
package store

import (
	"context"
	"time"

	"github.com/berthdev/berth/api"
)

// Session states (SPEC section 10), as the REST API defines them.
const (
	StateStarting      = api.StateStarting
	StateRunning       = api.StateRunning
	StateStopping      = api.StateStopping
	StateStopped       = api.StateStopped
	StateExpired       = api.StateExpired
	StateUncertain     = api.StateUncertain
	StateCleanupFailed = api.StateCleanupFailed
)

// Live reports whether a session in state s holds the agent's one computer
// slot: no other session may start for the agent while it does.
func Live(s string) bool {
	return s == StateStarting || s == StateRunning || s == StateUncertain
}

// Ended reports whether a session in state s has ended for good.
func Ended(s string) bool {
	return s == StateStopped || s == StateExpired
}

// Agent is an AI agent that uses computer tools.
type Agent struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Workspace string    `json:"workspace"`
	CreatedAt time.Time `json:"createdAt"`
}

// Connection attaches a provider to an agent. Credentials hold the sealed
// (encrypted) credentials; they never leave the supervisor.
type Connection struct {
	AgentID      string `json:"agent"`
	Provider     string `json:"provider"`
	Image        string `json:"image"`
	LeaseSeconds int    `json:"leaseSeconds"`
	DailySeconds int    `json:"dailySeconds"`
	// Persistence is api.PersistenceNone or api.PersistenceHome.
	Persistence string `json:"persistence"`
	// IdleSleepSeconds and MaxCheckpoints apply to persistent connections.
	IdleSleepSeconds int `json:"idleSleepSeconds,omitempty"`
	MaxCheckpoints   int `json:"maxCheckpoints,omitempty"`
	// BrowserRecording and BrowserProxyCountry are a hosted browser
	// connection's options (see api.ConnectRequest).
	BrowserRecording    bool   `json:"browserRecording,omitempty"`
	BrowserProxyCountry string `json:"browserProxyCountry,omitempty"`
	// DesktopUsers is how many holders may use the desktop tools of the
	// connection's computer at once (api.DefaultDesktopUsers when 0).
	DesktopUsers int `json:"desktopUsers"`
	// BrowserEvaluate allows the browser tool browser_evaluate.
	BrowserEvaluate bool      `json:"browserEvaluate,omitempty"`
	CreatedAt       time.Time `json:"createdAt"`
	Credentials     []byte    `json:"-"`
}

// Session is one computer of a connection, from reservation to cleanup.
type Session struct {
	ID         string
	AgentID    string
	Workspace  string // the agent's workspace when the session started
	Provider   string
	Image      string
	ComputerID string
	AttemptID  string
	State      string
	MachineID  string
	Endpoint   string
	// Header holds extra request headers for computerd, JSON encoded.
	Header string
	// Day is the UTC day (YYYY-MM-DD) whose budget the reservation counts on.
	Day             string
	ReservedSeconds int
	// ChargedSeconds is the time counted once the session has ended.
	ChargedSeconds int
	CreatedAt      time.Time
	ExpiresAt      time.Time
	EndedAt        time.Time // zero while the session lives
	CleanupTries   int
	NextCleanupAt  time.Time
	LastError      string
	// Owner is the supervisor instance that last claimed the session, and
	// ClaimUntil when that claim runs out (see Calls.ClaimSession).
	Owner      string
	ClaimUntil time.Time
	// Home is where the agent's home stands in a session of a persistent
	// connection (HomeWake, HomeLive, ...; "" without persistence), and
	// WakeFrom the archive a HomeWake session restores (SleepArchive or a
	// checkpoint's name).
	Home     string
	WakeFrom string
	// SleepAt is when a running persistent session sleeps for want of
	// tool calls (zero: never).
	SleepAt time.Time
}

// Budget is one connection's budget for one UTC day.
type Budget struct {
	Day             string    `json:"day"`
	DailySeconds    int       `json:"dailySeconds"`
	UsedSeconds     int       `json:"usedSeconds"`
	ReservedSeconds int       `json:"reservedSeconds"`
	LeftSeconds     int       `json:"leftSeconds"`
	ResetsAt        time.Time `json:"resetsAt"`
}

// Reservation asks for a new session's time.
type Reservation struct {
	Session Session   // ID, ComputerID, AttemptID, Image set by the caller
	Now     time.Time // the reservation's time; Day derives from it
	// MinSeconds is the shortest session worth starting.
	MinSeconds int
	// PoolOwner, when set, also claims the oldest waiting pool member of
	// the connection's provider and the session's image that PoolOwner
	// made (see Pool). The session then takes that member's ComputerID,
	// AttemptID, MachineID and Endpoint; with none waiting it keeps its own
	// and has no MachineID.
	PoolOwner string
}

// UsageRow is the session time of one provider or workspace, as the REST
// API reports it.
type UsageRow = api.UsageRow

// Store keeps the supervisor's state. Every method is safe for concurrent
// use, also from several supervisors sharing one database.
type Store interface {
	CreateAgent(ctx context.Context, a Agent) error
	GetAgent(ctx context.Context, id string) (Agent, error)
	// AgentsIn lists the agents of a workspace.
	AgentsIn(ctx context.Context, workspace string) ([]Agent, error)
	// Agents lists every agent, by id.
	Agents(ctx context.Context) ([]Agent, error)
	// DeleteAgent removes an agent that has no connection left.
	DeleteAgent(ctx context.Context, id string) error

	// CreateConnection fails with ErrConflict when the agent has one.
	CreateConnection(ctx context.Context, c Connection) error
	GetConnection(ctx context.Context, agentID string) (Connection, error)
	// SetConnectionLimits changes a connection's lease and daily budget;
	// ErrNotFound when the agent has no connection.
	SetConnectionLimits(ctx context.Context, agentID string, leaseSeconds, dailySeconds int) error
	// Connections lists every connection, by agent id.
	Connections(ctx context.Context) ([]Connection, error)
	DeleteConnection(ctx context.Context, agentID string) error

	// Reserve atomically checks that the agent has no live session, then
	// reserves min(lease, left of today's budget) and records the session as
	// starting. When a live session exists it returns that session and
	// ErrLive. When the budget has less than MinSeconds left it returns a
	// *BudgetError.
	Reserve(ctx context.Context, r Reservation) (Session, error)
	// LiveSession returns the agent's live session, or ErrNotFound.
	LiveSession(ctx context.Context, agentID string) (Session, error)
	// LiveComputer returns the live session whose computer is computerID,
	// or ErrNotFound.
	LiveComputer(ctx context.Context, computerID string) (Session, error)
	GetSession(ctx context.Context, id string) (Session, error)
	// UpdateSession writes s if the stored state is still from; it returns
	// ErrStale when another writer moved the session on.
	UpdateSession(ctx context.Context, s Session, from string) error
	// SessionsDue lists sessions that need the reaper at now: running ones
	// past their expiry and stopping or cleanup_failed ones whose next
	// cleanup time has come.
	SessionsDue(ctx context.Context, now time.Time, limit int) ([]Session, error)
	// SessionsByState lists sessions in any of the states.
	SessionsByState(ctx context.Context, states ...string) ([]Session, error)
	// SuspendedSessions lists the ended sessions that keep a suspended
	// machine (Home HomeSuspended).
	SuspendedSessions(ctx context.Context) ([]Session, error)

	// Budget returns the agent's budget for the UTC day of now.
	Budget(ctx context.Context, agentID string, now time.Time) (Budget, error)
	// Usage sums ended and live session time by "provider" or "workspace"
	// for sessions created in [from, to).
	Usage(ctx context.Context, by string, from, to, now time.Time) ([]UsageRow, error)

	Calls
	Pairing
	Keys
	Pool
	Seats
	DesktopSeats
	ConsoleSessions
	LenderLinks
	Archives
	Close() error
}

// Day returns the UTC day of t as YYYY-MM-DD, the key of a daily budget.
func Day(t time.Time) string { return t.UTC().Format("2006-01-02") }

// NextMidnight returns the UTC midnight after t, when the budget resets.
func NextMidnight(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}
