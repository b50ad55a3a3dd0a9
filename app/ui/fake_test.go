package ui

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/berthdev/berth/agent/control"
)

// memAgent is an agent held in memory for the headless UI tests: it keeps
// what the UI asked for, so tests assert at the agent side.
type memAgent struct {
	mu        sync.Mutex
	status    control.Status
	sessions  []control.Session
	approvals []control.Approval
	settings  control.Settings
	usage     control.Usage
	cleanups  []control.CleanupPrompt
	shots     map[string][]byte
	calls     []string
	fail      error
}

func (m *memAgent) record(format string, args ...any) error {
	m.calls = append(m.calls, fmt.Sprintf(format, args...))
	return m.fail
}

func (m *memAgent) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *memAgent) Status(context.Context) (control.Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.status
	s.Lending = m.settings.Lending
	s.Sessions = len(m.sessions)
	return s, nil
}

func (m *memAgent) Sessions(context.Context) ([]control.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sessions), nil
}

func (m *memAgent) StopSession(_ context.Context, id string) (control.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.record("stop %s", id); err != nil {
		return control.Session{}, err
	}
	for i, s := range m.sessions {
		if s.ID == id {
			m.sessions = slices.Delete(m.sessions, i, i+1)
			return s, nil
		}
	}
	return control.Session{}, &control.APIError{Status: 404, Code: control.CodeNotFound, Message: "no session " + id}
}

func (m *memAgent) Screenshot(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.shots[id]; ok {
		return b, nil
	}
	return nil, &control.APIError{Status: 404, Code: control.CodeNoScreenshot, Message: "no screen"}
}

func (m *memAgent) Approvals(context.Context) ([]control.Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.approvals), nil
}

func (m *memAgent) decide(id, state string) (control.Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.record("%s %s", state, id); err != nil {
		return control.Approval{}, err
	}
	for i, a := range m.approvals {
		if a.ID == id {
			a.State = state
			m.approvals[i] = a
			return a, nil
		}
	}
	return control.Approval{}, &control.APIError{Status: 404, Code: control.CodeNotFound, Message: "no approval " + id}
}

func (m *memAgent) Approve(_ context.Context, id string) (control.Approval, error) {
	return m.decide(id, control.ApprovalApproved)
}

func (m *memAgent) Deny(_ context.Context, id string) (control.Approval, error) {
	return m.decide(id, control.ApprovalDenied)
}

func (m *memAgent) Settings(context.Context) (control.Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.settings, nil
}

// SetSettings refuses an out-of-range count of computers, as the agent
// does, with a message naming the field.
func (m *memAgent) SetSettings(_ context.Context, s control.Settings) (control.Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.record("settings %+v", s); err != nil {
		return control.Settings{}, err
	}
	if s.MaxComputers < 1 || s.MaxComputers > 64 {
		return control.Settings{}, &control.APIError{Status: 400, Code: control.CodeBadRequest,
			Message: fmt.Sprintf("maxComputers: %d is outside 1..64", s.MaxComputers)}
	}
	m.settings = s
	return s, nil
}

func (m *memAgent) SetLending(_ context.Context, on bool) (control.Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.record("lending %v", on); err != nil {
		return control.Settings{}, err
	}
	m.settings.Lending = on
	return m.settings, nil
}

func (m *memAgent) Usage(context.Context, int) (control.Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usage, nil
}

func (m *memAgent) Cleanups(context.Context) ([]control.CleanupPrompt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.cleanups), nil
}

func (m *memAgent) resolve(id, state string) (control.CleanupPrompt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.record("%s %s", state, id); err != nil {
		return control.CleanupPrompt{}, err
	}
	for i, c := range m.cleanups {
		if c.ID == id {
			c.State = state
			m.cleanups[i] = c
			return c, nil
		}
	}
	return control.CleanupPrompt{}, &control.APIError{Status: 404, Code: control.CodeNotFound, Message: "no leftover " + id}
}

func (m *memAgent) RemoveLeftover(_ context.Context, id string) (control.CleanupPrompt, error) {
	return m.resolve(id, control.CleanupRemoved)
}

func (m *memAgent) KeepLeftover(_ context.Context, id string) (control.CleanupPrompt, error) {
	return m.resolve(id, control.CleanupKept)
}
