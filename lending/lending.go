// Package lending is the protocol between a supervisor and the machines
// lent to it: the API a lending agent serves over the relay link (paths,
// the create request, the computers and state it answers), its error codes,
// the size limits both sides check, and the owner's live-view key. The
// supervisor's side (providers/local) and the lending agent (agent/lender)
// both import it and nothing else of each other.
package lending

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
)

// Paths of the API the lender serves to the supervisor over the relay
// link. Bodies are JSON; errors are {"error": {"code", "message"}}.
const (
	// PathComputers: POST CreateRequest → Computer (201); GET → []Computer.
	PathComputers = "/v1/computers"
	// PathComputer: DELETE → 204. {id} is the computer id or its machine
	// id (the container's name). Deleting a computer that is gone is 204.
	PathComputer = "/v1/computers/{id}"
	// ComputerdPrefix: /v1/computers/{id}/computerd/... is proxied to that
	// computer's computerd, so the supervisor's computerd client uses
	// EndpointPath(id) as its base URL.
	ComputerdPrefix = "/computerd"
	// PathState: GET → State, for resyncing after a reconnect.
	PathState = "/v1/state"
)

// EndpointPath is the base path of a computer's computerd on the lender.
func EndpointPath(computerID string) string {
	return PathComputers + "/" + computerID + ComputerdPrefix
}

// CreateRequest asks the lender to start a computer: the supervisor's
// providers.Spec plus the workspace and, when the supervisor sets them, the
// size it wants. It never carries provider credentials.
type CreateRequest struct {
	ComputerID string `json:"computerId"`
	SessionID  string `json:"sessionId"`
	AttemptID  string `json:"attemptId"`
	// Deployment is the supervisor's deployment id.
	Deployment string            `json:"deployment"`
	Agent      string            `json:"agent"`
	Workspace  string            `json:"workspace,omitempty"`
	Image      string            `json:"image,omitempty"`
	TokenHash  string            `json:"tokenHash"`
	Env        map[string]string `json:"env,omitempty"`
	// LeaseSeconds is the longest the computer may live (60..86400).
	LeaseSeconds int `json:"leaseSeconds"`
	// CPUs and MemoryMB, when set, are the size asked for; the owner's
	// limits cap them. Zero takes the owner's setting.
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memoryMB,omitempty"`
}

// Computer is a computer the lender runs, as the supervisor sees it.
type Computer struct {
	ComputerID string `json:"computerId"`
	MachineID  string `json:"machineId"`
	// Labels are the providers.Label* labels, with the supervisor's
	// deployment.
	Labels  map[string]string `json:"labels"`
	Started time.Time         `json:"started"`
	Expires time.Time         `json:"expires"`
}

// State is what the lender runs and whether it lends.
type State struct {
	AgentID   string     `json:"agentId"`
	Version   string     `json:"version"`
	Lending   bool       `json:"lending"`
	Computers []Computer `json:"computers"`
	// Limits are the owner's limits, as the lender reports them (nil from
	// a lender that does not).
	Limits *Limits `json:"limits,omitempty"`
}

// Limits are what a lender's owner allows.
type Limits struct {
	MaxComputers int     `json:"maxComputers"` // at once
	CPUs         float64 `json:"cpus"`         // per computer
	MemoryMB     int64   `json:"memoryMB"`     // per computer
	DailySeconds int64   `json:"dailySeconds"` // of computer time a day
	Desktop      bool    `json:"desktop"`      // desktop computers allowed
	// Hours is the daily window lending is allowed in, "HH:MM-HH:MM" in
	// the owner's zone; empty is any time.
	Hours string `json:"hours,omitempty"`
}

// The most a supervisor reads of a lender's answer: one computer or the
// state, and the list of computers.
const (
	MaxAnswerBytes = 1 << 20
	MaxListBytes   = 16 << 20
)

// Sizes a supervisor may ask for and an owner may allow per computer.
const (
	MinCPUs     = 0.1
	MaxCPUs     = 64
	MinMemoryMB = 256
	MaxMemoryMB = 65536
)

// Error codes the lender answers a refused or failed request with. Each
// owner limit has its own code and message.
const (
	CodePaused          = "lending_paused"      // 503: the owner turned lending off
	CodeTooMany         = "too_many_computers"  // 422: at most N computers at once
	CodeCPU             = "cpu_limit"           // 422: more CPUs than the owner allows
	CodeMemory          = "memory_limit"        // 422: more memory than the owner allows
	CodeBudget          = "daily_budget"        // 422: the day's lending budget is spent
	CodeHours           = "outside_hours"       // 422: outside the allowed hours
	CodeDesktop         = "desktop_not_allowed" // 422: the owner allows no desktop computers
	CodeDenied          = "approval_denied"     // 403: the owner denied the session
	CodeApprovalTimeout = "approval_timeout"    // 503: nobody decided in time
	CodeBadRequest      = "bad_request"         // 400
	CodeNotFound        = "not_found"           // 404
	CodeConflict        = "conflict"            // 409
	CodeBadImage        = "image_missing"       // 502: the computer image is not on this machine
	CodeUnavailable     = "unavailable"         // 503: Docker or the computer unreachable
	CodeNoScreenshot    = "no_screenshot"       // 404
	CodeInternal        = "internal"            // 500
)

// Error is a refusal or failure with the status and code a caller sees,
// answered in the shared error envelope {"error": {"code", "message"}}.
type Error = httpjson.Error

// OwnerViewKey is the key of a desktop session's owner link, the
// supervisor's /view/{session}/owner?key=KEY: base64url of HMAC-SHA256
// under the computer's token of "berth owner view\n" and the session id.
// Only the supervisor, which derives the token, and the lending agent,
// which relays it on every call to the computer, can make it; the computer
// holds only the token's hash, and the key reveals nothing of the token.
func OwnerViewKey(computerToken, session string) string {
	mac := hmac.New(sha256.New, []byte(computerToken))
	mac.Write([]byte("berth owner view\n" + session))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}
