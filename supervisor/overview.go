package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
