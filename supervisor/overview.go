package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// AgentOverview is one agent with its connection and live session, as the
// operator's console lists them.
type AgentOverview struct {
	Agent store.Agent
	// Connection is nil when the agent has none.
	Connection *store.Connection
	// Session is the live session, nil when there is none; MachineID is
	// its provider's machine id ("" until the provider answered).
	Session   *SessionView
	MachineID string
}

// Overview lists the agents of workspace ("" for every workspace) with
// their connections and live sessions, in three reads of the store
// whatever the number of agents.
func (s *Service) Overview(ctx context.Context, workspace string) ([]AgentOverview, error) {
	var agents []store.Agent
	var err error
	if workspace == "" {
		agents, err = s.st.Agents(ctx)
	} else {
		agents, err = s.st.AgentsIn(ctx, workspace)
	}
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	conns, err := s.st.Connections(ctx)
	if err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	live, err := s.st.SessionsByState(ctx, store.StateStarting, store.StateRunning, store.StateUncertain)
	if err != nil {
		return nil, fmt.Errorf("list live sessions: %w", err)
	}
	byAgent := make(map[string]*store.Connection, len(conns))
	for i := range conns {
		byAgent[conns[i].AgentID] = &conns[i]
	}
	sessions := make(map[string]store.Session, len(live))
	for _, x := range live {
		sessions[x.AgentID] = x
	}
	out := make([]AgentOverview, 0, len(agents))
	for _, a := range agents {
		o := AgentOverview{Agent: a, Connection: byAgent[a.ID]}
		if x, ok := sessions[a.ID]; ok {
			v := s.view(x)
			o.Session, o.MachineID = &v, x.MachineID
		}
		out = append(out, o)
	}
	return out, nil
}

// SetLimits changes the lease and daily budget of an agent's connection,
// within the limits Connect checks; a session already running keeps the
// lease it was given.
func (s *Service) SetLimits(ctx context.Context, agent string, leaseSeconds, dailySeconds int) (store.Connection, error) {
	if err := checkLimits(leaseSeconds, dailySeconds); err != nil {
		return store.Connection{}, err
	}
	if _, err := s.connection(ctx, agent); err != nil {
		return store.Connection{}, err
	}
	if err := s.st.SetConnectionLimits(ctx, agent, leaseSeconds, dailySeconds); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Connection{}, s.agentErr(agent, err)
		}
		return store.Connection{}, err
	}
	s.log.Info("limits changed", "agent", agent, "lease", leaseSeconds, "daily", dailySeconds)
	return s.connection(ctx, agent)
}

// AttentionView is a session that needs the operator: uncertain (the
// provider may hold a machine whose id was lost) or whose cleanup keeps
// failing.
type AttentionView struct {
	Session   SessionView
	Agent     string
	Workspace string
	// MachineID is the provider's machine id ("" when it was lost);
	// AttemptID is the label every machine of the attempt carries
	// (berth.attempt), to look for in the provider's console.
	MachineID    string
	AttemptID    string
	ComputerID   string
	LastError    string
	CleanupTries int
}

// Attention lists the sessions of workspace ("" for every workspace) that
// are uncertain or whose cleanup failed, oldest first.
func (s *Service) Attention(ctx context.Context, workspace string) ([]AttentionView, error) {
	xs, err := s.st.SessionsByState(ctx, store.StateUncertain, store.StateCleanupFailed)
	if err != nil {
		return nil, fmt.Errorf("list sessions needing attention: %w", err)
	}
	out := make([]AttentionView, 0, len(xs))
	for _, x := range xs {
		if workspace != "" && x.Workspace != workspace {
			continue
		}
		out = append(out, AttentionView{
			Session: s.view(x), Agent: x.AgentID, Workspace: x.Workspace, MachineID: x.MachineID,
			AttemptID: x.AttemptID, ComputerID: x.ComputerID, LastError: x.LastError, CleanupTries: x.CleanupTries,
		})
	}
	slices.SortStableFunc(out, func(a, b AttentionView) int { return a.Session.StartedAt.Compare(b.Session.StartedAt) })
	return out, nil
}

// MaxSessionCalls bounds the calls SessionCalls lists.
const MaxSessionCalls = 500

// CallView is one recorded tool call, as the console's session page shows
// it. Calls are recorded when they carry an idempotency key (every MCP
// call; REST calls with Idempotency-Key) and kept for store.CallTTL.
type CallView struct {
	At       time.Time
	Tool     string
	Duration time.Duration // 0 while pending
	Status   int           // the HTTP status answered; 0 while pending
	// ExitCode is an exec's exit code (nil for other tools, errors and
	// pending calls); Uncertain is set when its outcome was lost.
	ExitCode  *int
	Uncertain bool
	Pending   bool
}

// SessionDetail is a session with the tool calls recorded during it.
type SessionDetail struct {
	Session   SessionView
	Agent     string
	Workspace string
	MachineID string
	EndedAt   time.Time
	Calls     []CallView
	// More is set when there were more than MaxSessionCalls calls.
	More bool
}

// SessionCalls returns a session and the calls its agent made while it
// lived; a session of another workspace than workspace (when not "")
// is answered as missing.
func (s *Service) SessionCalls(ctx context.Context, id, workspace string) (SessionDetail, error) {
	x, err := s.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && workspace != "" && x.Workspace != workspace) {
		return SessionDetail{}, errorf(http.StatusNotFound, CodeNotFound, "session %q does not exist", id)
	}
	if err != nil {
		return SessionDetail{}, err
	}
	d := SessionDetail{Session: s.view(x), Agent: x.AgentID, Workspace: x.Workspace, MachineID: x.MachineID, EndedAt: x.EndedAt}
	to := x.EndedAt
	if to.IsZero() {
		to = s.clk.Now()
	}
	calls, err := s.st.AgentCalls(ctx, x.AgentID, x.CreatedAt, to.Add(time.Second), MaxSessionCalls+1)
	if err != nil {
		return d, fmt.Errorf("calls of session %s: %w", id, err)
	}
	if len(calls) > MaxSessionCalls {
		calls, d.More = calls[:MaxSessionCalls], true
	}
	for _, c := range calls {
		v := CallView{At: c.CreatedAt, Tool: c.Tool, Status: c.Status, Pending: c.State == store.CallPending}
		if !v.Pending {
			v.Duration = c.FinishedAt.Sub(c.CreatedAt)
		}
		if c.Tool == "exec" && c.Status == http.StatusOK {
			var r struct {
				ExitCode  int  `json:"exitCode"`
				Uncertain bool `json:"uncertain"`
			}
			if json.Unmarshal(c.Response, &r) == nil {
				v.ExitCode, v.Uncertain = &r.ExitCode, r.Uncertain
			}
		}
		d.Calls = append(d.Calls, v)
	}
	return d, nil
}
