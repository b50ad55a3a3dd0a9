// Package agentlink is what the companion app knows of the lending agent:
// the Agent interface its window and tray use (the agent's control API,
// agent/control), how the tray sums up the agent's state, and how the app
// reaches an agent: a system service's control socket, or an agent run in
// the app's own process. It does not import fyne.
package agentlink

import (
	"context"

	"github.com/berthdev/berth/agent/control"
)

// Agent is the lending agent as the companion sees it: the methods of the
// control API's client. Every method may be called from any goroutine.
type Agent interface {
	Status(ctx context.Context) (control.Status, error)
	Sessions(ctx context.Context) ([]control.Session, error)
	StopSession(ctx context.Context, id string) (control.Session, error)
	Screenshot(ctx context.Context, id string) ([]byte, error)
	Approvals(ctx context.Context) ([]control.Approval, error)
	Approve(ctx context.Context, id string) (control.Approval, error)
	Deny(ctx context.Context, id string) (control.Approval, error)
	Settings(ctx context.Context) (control.Settings, error)
	SetSettings(ctx context.Context, s control.Settings) (control.Settings, error)
	SetLending(ctx context.Context, on bool) (control.Settings, error)
	Usage(ctx context.Context, days int) (control.Usage, error)
	Cleanups(ctx context.Context) ([]control.CleanupPrompt, error)
	RemoveLeftover(ctx context.Context, id string) (control.CleanupPrompt, error)
	KeepLeftover(ctx context.Context, id string) (control.CleanupPrompt, error)
}

var _ Agent = (*control.Client)(nil)

// State is what the tray icon shows.
type State string

// The tray states.
const (
	StateLending State = "lending"
	StatePaused  State = "paused"
	StateBusy    State = "busy"
	StateOffline State = "offline"
)

// StateOf sums up s for the tray: paused (lending off) wins over offline
// (paired, but no link to the relay), which wins over busy (sessions
// running) and lending.
func StateOf(s control.Status) State {
	switch {
	case !s.Lending:
		return StatePaused
	case s.Supervisor.Paired && !s.Relay.Online:
		return StateOffline
	case s.Sessions > 0:
		return StateBusy
	default:
		return StateLending
	}
}

// NearlySpent reports whether at least 90% of today's lending budget is
// used.
func NearlySpent(u control.Usage) bool {
	return u.DailySeconds > 0 && u.Today.Seconds*10 >= u.DailySeconds*9
}
