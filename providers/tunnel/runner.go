package tunnel

// The runner API. Next to the reverse proxy to its computer's computerd, a
// `berth agent tunnel` runner serves a few routes of its own under
// RunnerPath, authenticated by the same connection token. A supervisor's
// tunnel provider claims the runner's computer for a session (one session
// at a time) and, when the session ends, resets the runner: the runner
// destroys that computer and starts a fresh one with the same token, so
// that the connection file stays valid and every session starts empty.
// computerd has no route under RunnerPath, so the two never clash.

// Runner API paths.
const (
	// RunnerPath answers the runner's state (GET, RunnerState).
	RunnerPath = "/v1/runner"
	// ClaimPath claims the computer for a session (POST, ClaimRequest ->
	// ClaimResult); a second claim before a reset is refused with 409
	// CodeInUse.
	ClaimPath = "/v1/runner/claim"
	// ResetPath destroys a claimed computer and starts a fresh one (POST,
	// ResetRequest -> ResetResult).
	ResetPath = "/v1/runner/reset"
)

// CodeInUse answers a claim while another session holds the computer (409).
const CodeInUse = "runner_in_use"

// MaxRunnerBytes bounds a runner API request or answer body.
const MaxRunnerBytes = 64 << 10

// ClaimRequest claims the runner's computer.
type ClaimRequest struct {
	// Labels are the session's labels (providers.Spec.Labels); a claim
	// with the attempt label of the current claim is the same claim again.
	Labels map[string]string `json:"labels"`
	// Env is added to the computer's environment; the runner replaces the
	// proxy variables with its own egress proxy's.
	Env map[string]string `json:"env,omitempty"`
}

// ClaimResult answers a claim.
type ClaimResult struct {
	// Machine is the claimed computer's id, what ResetRequest names.
	Machine string `json:"machine"`
}

// ResetRequest ends the session on Machine.
type ResetRequest struct {
	Machine string `json:"machine"`
}

// ResetResult answers a reset.
type ResetResult struct {
	// Gone is set when Machine was no longer the runner's computer
	// (destroyed by an earlier reset, or never claimed here): nothing was
	// done.
	Gone bool `json:"gone,omitempty"`
}

// RunnerState is the runner's computer as GET RunnerPath answers it.
type RunnerState struct {
	// Machine is the current computer's id; empty while none runs.
	Machine string `json:"machine,omitempty"`
	// Claimed is set while a session holds it; Labels are that session's.
	Claimed bool              `json:"claimed"`
	Labels  map[string]string `json:"labels,omitempty"`
}
