package lender

import "time"

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
}

// ErrorBody is the shape of every error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}
