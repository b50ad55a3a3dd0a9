package control

import (
	"time"
)

// Endpoint paths of the control API. Every path is served on the agent's
// unix socket (mode 0600, so only the machine's owner reaches it); bodies
// are JSON; errors are {"error": {"code", "message"}} with a fitting status.
const (
	// PathStatus: GET → Status.
	PathStatus = "/v1/status"
	// PathSessions: GET → []Session (the running computers).
	PathSessions = "/v1/sessions"
	// PathSessionStop: POST (no body) → Session, the stopped session.
	// 404 for an unknown session.
	PathSessionStop = "/v1/sessions/{id}/stop"
	// PathScreenshot: GET → the screen as image/png, proxied to the
	// computer's computerd. 404 (code no_screenshot) when the computer has
	// no screenshot endpoint (a headless image) or no screen yet.
	PathScreenshot = "/v1/sessions/{id}/screenshot"
	// PathApprovals: GET → []Approval (sessions waiting for the owner).
	PathApprovals = "/v1/approvals"
	// PathApprove and PathDeny: POST (no body) → Approval, as decided. 404
	// for an unknown or already decided approval.
	PathApprove = "/v1/approvals/{id}/approve"
	PathDeny    = "/v1/approvals/{id}/deny"
	// PathSettings: GET → Settings; PUT Settings → Settings (replaces every
	// limit); PATCH SettingsUpdate → Settings (changes only the fields
	// given). A value out of range is 400 naming the field and the limit,
	// and nothing is changed.
	PathSettings = "/v1/settings"
	// PathUsage: GET ?days=N (1..90, default 14) → Usage.
	PathUsage = "/v1/usage"
	// PathCleanups: GET → []CleanupPrompt (leftovers the agent could not
	// decide about after a restart).
	PathCleanups = "/v1/cleanups"
	// PathCleanupRemove and PathCleanupKeep: POST (no body) → CleanupPrompt,
	// as resolved. Remove deletes the leftover from Docker; keep leaves it
	// and stops asking about it.
	PathCleanupRemove = "/v1/cleanups/{id}/remove"
	PathCleanupKeep   = "/v1/cleanups/{id}/keep"
)

// Error codes the control API answers with, besides the lender's limit
// codes (see agent/lender), which Approval and errors may carry.
const (
	CodeBadRequest   = "bad_request"   // 400
	CodeNotFound     = "not_found"     // 404
	CodeNoScreenshot = "no_screenshot" // 404
	CodeUnavailable  = "unavailable"   // 503: Docker or the computer unreachable
	CodeInternal     = "internal"      // 500
)

// Status is the agent's state at a glance.
type Status struct {
	// Lending is the owner's lending switch.
	Lending bool `json:"lending"`
	// Relay is the agent's link to the relay.
	Relay RelayStatus `json:"relay"`
	// Supervisor is the supervisor the agent is paired with.
	Supervisor Pairing `json:"supervisor"`
	// Sessions counts the running computers; PendingApprovals the sessions
	// waiting for the owner; Cleanups the open cleanup prompts.
	Sessions         int `json:"sessions"`
	PendingApprovals int `json:"pendingApprovals"`
	Cleanups         int `json:"cleanups"`
	// TodaySeconds is today's lending time (owner's time zone), and
	// DailySeconds the owner's daily budget.
	TodaySeconds int64 `json:"todaySeconds"`
	DailySeconds int64 `json:"dailySeconds"`
	// Version is the agent's version.
	Version string `json:"version"`
	// Egress is the agent's egress proxy.
	Egress EgressStatus `json:"egress"`
	// WarmPool is the warm pool's state.
	WarmPool PoolStatus `json:"warmPool"`
}

// EgressStatus is the agent's egress proxy as the owner sees it.
type EgressStatus struct {
	// On is the owner's setting; Listening whether the proxy runs (it does
	// not when Docker has no docker0 address, for instance).
	On        bool `json:"on"`
	Listening bool `json:"listening"`
	// Address is where computers reach it (host:port), when it runs.
	Address string `json:"address,omitempty"`
	// Allowed and Refused count the connections it let through and refused
	// since the agent started.
	Allowed uint64 `json:"allowed"`
	Refused uint64 `json:"refused"`
}

// PoolStatus is the warm pool: computers started ahead of time.
type PoolStatus struct {
	// Size is the owner's setting; Waiting the computers ready now;
	// Creating those being started.
	Size     int `json:"size"`
	Waiting  int `json:"waiting"`
	Creating int `json:"creating"`
	// Claimed counts starts answered from the pool since the agent started.
	Claimed int64 `json:"claimed"`
}

// RelayStatus is the agent's link to the relay.
type RelayStatus struct {
	URL    string `json:"url"`
	Online bool   `json:"online"`
	// Since is when the link last came up (Online) or went down.
	Since time.Time `json:"since,omitzero"`
	// LastError says why the last attempt to connect failed, if it did.
	LastError string `json:"lastError,omitempty"`
}

// Pairing names the supervisor the agent is paired with; the token is
// never part of it.
type Pairing struct {
	Paired   bool   `json:"paired"`
	URL      string `json:"url,omitempty"`
	LenderID string `json:"agentId,omitempty"` // this machine's companion id
}

// Session is one computer running on this machine.
type Session struct {
	ID        string `json:"id"` // the computer id
	SessionID string `json:"sessionId"`
	// Agent and Workspace are the AI agent using the computer and its
	// workspace at the supervisor.
	Agent     string `json:"agent"`
	Workspace string `json:"workspace"`
	// Provider is "local" for every session of this agent.
	Provider string    `json:"provider"`
	Image    string    `json:"image"` // headless or desktop
	Started  time.Time `json:"started"`
	Expires  time.Time `json:"expires"`
	// TimeLeftSeconds is what is left of the lease.
	TimeLeftSeconds int64 `json:"timeLeftSeconds"`
	// CPUPercent is the CPU used since the previous sample (100 = one
	// core); MemoryBytes and MemoryLimitBytes are from the Docker stats API.
	CPUPercent       float64 `json:"cpuPercent"`
	MemoryBytes      uint64  `json:"memoryBytes"`
	MemoryLimitBytes uint64  `json:"memoryLimitBytes"`
	// StatsError says why the live figures are missing, if they are.
	StatsError string `json:"statsError,omitempty"`
	// ViewURL is a desktop session's live view for the owner: the paired
	// supervisor's owner link, which opens its viewer page with a view
	// token of its own (within the desktop's viewer limit). Empty for a
	// headless session, and until the supervisor's first call to the
	// computer has passed through the agent.
	ViewURL string `json:"viewUrl,omitempty"`
	// State is the session as the owner sees it: running, stopping,
	// cleanup_failed or uncertain (the Session states). StateReason says
	// why when it is not running: the last removal's error, or why the
	// agent cannot tell whether the computer exists.
	State       string `json:"state"`
	StateReason string `json:"stateReason,omitempty"`
	// FailedAttempts counts the removals of the computer that failed in a
	// row; NextAttempt is when the agent tries again by itself.
	FailedAttempts int       `json:"failedAttempts,omitempty"`
	NextAttempt    time.Time `json:"nextAttempt,omitzero"`
	// Machine is the computer's Docker container, for removing it by hand
	// (docker rm -f MACHINE removes it; its network and volume carry the
	// same computer id).
	Machine string `json:"machine,omitempty"`
}

// Session states (Session.State).
const (
	// SessionRunning: the computer runs and nothing is wrong.
	SessionRunning = "running"
	// SessionStopping: the session was ended but removing its computer
	// failed; the agent keeps it and tries again.
	SessionStopping = "stopping"
	// SessionCleanupFailed: removing the computer failed CleanupFailedAfter
	// times in a row. The agent still tries again, but the owner should
	// look: stop it again, or remove the container by hand.
	SessionCleanupFailed = "cleanup_failed"
	// SessionUncertain: the agent cannot tell whether the computer exists
	// (Docker does not answer about it).
	SessionUncertain = "uncertain"
)

// CleanupFailedAfter is how many removals of a computer must fail in a row
// before its session is cleanup_failed rather than stopping.
const CleanupFailedAfter = 3

// Approval is a new session waiting for the owner's approve or deny.
type Approval struct {
	ID        string    `json:"id"`
	Agent     string    `json:"agent"`
	Workspace string    `json:"workspace"`
	Image     string    `json:"image"`
	Requested time.Time `json:"requested"`
	// Deadline is when the request is refused if nobody decides.
	Deadline time.Time `json:"deadline"`
	// State is pending, approved, denied or timed_out.
	State string `json:"state"`
}

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalTimedOut = "timed_out"
)

// Settings are the owner's limits, checked before every start.
type Settings struct {
	// Lending is the lending switch; off refuses every start.
	Lending bool `json:"lending"`
	// MaxComputers is how many computers may run at once (1..64).
	MaxComputers int `json:"maxComputers"`
	// CPUs and MemoryMB are each computer's size (0.1..64 CPUs,
	// 256..65536 MB); a computer asking for more is refused.
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memoryMB"`
	// DailySeconds is the daily lending budget (60..86400), summed over all
	// computers and counted by the owner's local day.
	DailySeconds int64 `json:"dailySeconds"`
	// Hours is when lending is allowed, in TimeZone; empty From and To
	// mean at any time.
	Hours Hours `json:"hours"`
	// TimeZone is an IANA zone name such as Europe/Berlin; empty is the
	// machine's local zone.
	TimeZone string `json:"timeZone,omitempty"`
	// Desktop allows computers with a screen (the desktop image).
	Desktop bool `json:"desktop"`
	// Approval makes each new session wait for the owner; without a
	// decision within ApprovalTimeoutSeconds (10..3600) it is refused.
	Approval               bool `json:"approval"`
	ApprovalTimeoutSeconds int  `json:"approvalTimeoutSeconds"`
	// Egress gives each computer the agent's egress proxy (HTTP_PROXY and
	// HTTPS_PROXY with its own credentials), its only way out; the proxy
	// refuses this machine's own addresses, its LAN, loopback and the
	// metadata address. Off leaves computers with no way out at all.
	Egress bool `json:"egress"`
	// WarmPoolSize is how many headless computers wait started, ready for
	// a start (0..MaxComputers). They count toward MaxComputers.
	WarmPoolSize int `json:"warmPoolSize"`
	// WarmPoolMax, when above WarmPoolSize, lets the pool grow to the
	// largest burst of starts seen within one refill in the last 10
	// minutes, and shrink back when they stop (WarmPoolSize..MaxComputers;
	// 0 is WarmPoolSize, a fixed size).
	WarmPoolMax int `json:"warmPoolMax,omitempty"`
}

// Hours is a daily window, "HH:MM" to "HH:MM" in the owner's time zone.
// A window whose end is before its start spans midnight (22:00 to 06:00).
// Days, when not empty, limits it to those weekdays ("mon".."sun"), by the
// day the window opens.
type Hours struct {
	From string   `json:"from,omitempty"`
	To   string   `json:"to,omitempty"`
	Days []string `json:"days,omitempty"`
}

// SettingsUpdate changes the fields that are set and leaves the rest.
type SettingsUpdate struct {
	Lending                *bool    `json:"lending,omitempty"`
	MaxComputers           *int     `json:"maxComputers,omitempty"`
	CPUs                   *float64 `json:"cpus,omitempty"`
	MemoryMB               *int64   `json:"memoryMB,omitempty"`
	DailySeconds           *int64   `json:"dailySeconds,omitempty"`
	Hours                  *Hours   `json:"hours,omitempty"`
	TimeZone               *string  `json:"timeZone,omitempty"`
	Desktop                *bool    `json:"desktop,omitempty"`
	Approval               *bool    `json:"approval,omitempty"`
	ApprovalTimeoutSeconds *int     `json:"approvalTimeoutSeconds,omitempty"`
	Egress                 *bool    `json:"egress,omitempty"`
	WarmPoolSize           *int     `json:"warmPoolSize,omitempty"`
	WarmPoolMax            *int     `json:"warmPoolMax,omitempty"`
}

// Usage is the lending history from the local ledger.
type Usage struct {
	// TimeZone is the zone days are counted in.
	TimeZone string `json:"timeZone"`
	// Today is today's lending; DailySeconds the owner's budget.
	Today        DayUsage `json:"today"`
	DailySeconds int64    `json:"dailySeconds"`
	// Days has one entry per day, oldest first, today last, days without
	// lending included (as zero).
	Days []DayUsage `json:"days"`
	// ByAgent and ByWorkspace sum the same period, most seconds first.
	ByAgent     []UsageRow `json:"byAgent"`
	ByWorkspace []UsageRow `json:"byWorkspace"`
}

// DayUsage is one local day's lending.
type DayUsage struct {
	Day      string `json:"day"` // YYYY-MM-DD in the owner's zone
	Seconds  int64  `json:"seconds"`
	Sessions int64  `json:"sessions"`
}

// UsageRow is the lending of one agent or workspace.
type UsageRow struct {
	Key      string `json:"key"`
	Seconds  int64  `json:"seconds"`
	Sessions int64  `json:"sessions"`
}

// CleanupPrompt is something Berth left on this machine's Docker engine
// that the agent could not match to a running session after a restart.
type CleanupPrompt struct {
	ID string `json:"id"`
	// Kind is container, volume or network.
	Kind string `json:"kind"`
	// Name is the Docker name; Computer and Session the Berth ids it carries.
	Name     string    `json:"name"`
	Computer string    `json:"computer,omitempty"`
	Session  string    `json:"session,omitempty"`
	Agent    string    `json:"agent,omitempty"`
	Reason   string    `json:"reason"`
	Found    time.Time `json:"found"`
	// State is open, removed or kept.
	State string `json:"state"`
}

// Kinds of leftovers and the states of a prompt.
const (
	KindContainer = "container"
	KindVolume    = "volume"
	KindNetwork   = "network"

	CleanupOpen    = "open"
	CleanupRemoved = "removed"
	CleanupKept    = "kept"
)

// SocketName is the control socket's file name in the agent's data folder.
const SocketName = "agent.sock"
