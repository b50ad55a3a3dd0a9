package ui

import (
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"github.com/berthdev/berth/agent/control"
)

// troubledSessions are a session whose cleanup failed, an uncertain one,
// and one whose first removal failed (stopping, which needs no notice).
func troubledSessions() []control.Session {
	return []control.Session{
		{
			ID: "c3", SessionID: "s3", Agent: "builder", Workspace: "ci", Provider: "local", Image: "headless",
			Started: now.Add(-20 * time.Minute), Expires: now.Add(-time.Minute), Machine: "berth-c-c3",
			State: control.SessionCleanupFailed, FailedAttempts: 3, NextAttempt: now.Add(time.Minute),
			StateReason: "remove container berth-c-c3: Error response from daemon: device or resource busy",
		},
		{
			ID: "c4", SessionID: "s4", Agent: "tester", Workspace: "qa", Provider: "local", Image: "headless",
			Started: now.Add(-10 * time.Minute), Expires: now.Add(5 * time.Minute), Machine: "berth-c-c4",
			State: control.SessionUncertain, StateReason: "Docker does not answer",
		},
		{
			ID: "c5", SessionID: "s5", Agent: "writer", Workspace: "docs", Provider: "local", Image: "headless",
			Started: now.Add(-5 * time.Minute), Expires: now.Add(10 * time.Minute), Machine: "berth-c-c5",
			State: control.SessionStopping, FailedAttempts: 1, StateReason: "device or resource busy",
		},
	}
}

func TestSessionTroubleNotice(t *testing.T) {
	m := baseAgent(t)
	h := newHarness(t, m, Options{})
	if len(h.ui.prompter.troubles) != 0 {
		t.Fatalf("notices without troubled sessions: %v", h.ui.prompter.troubles)
	}
	ss := troubledSessions()

	// A desktop notification the first time a session's cleanup fails...
	m.mu.Lock()
	m.sessions = []control.Session{ss[0]}
	m.mu.Unlock()
	test.AssertNotificationSent(t, &fyne.Notification{Title: "Berth: a session needs you",
		Content: "The computer of agent builder could not be removed. Open Berth to remove it."}, h.refresh)
	// ...once per session.
	test.AssertNotificationSent(t, nil, h.refresh)
	// An uncertain session has one of its own; a stopping one none.
	m.mu.Lock()
	m.sessions = ss
	m.mu.Unlock()
	test.AssertNotificationSent(t, &fyne.Notification{Title: "Berth: a session needs you",
		Content: "Berth cannot tell whether the computer of agent tester still exists. Open Berth to see why."}, h.refresh)

	// The headless canvas lays out only on a resize; the window lays out
	// the grown prompts on its next frame, which this stands for.
	h.ui.Content().Refresh()
	h.markup("prompt_session_trouble.xml")
	p := h.ui.prompter
	if len(p.troubles) != 2 || p.troubles["c5"] != nil {
		t.Fatalf("notices for %v, want c3 and c4 only", p.troubles)
	}
	got := p.troubles["c3"].label.Text
	for _, want := range []string{"after 3 attempts", "device or resource busy", "tries again at 12:01:00", "docker rm -f berth-c-c3", "Try again"} {
		if !strings.Contains(got, want) {
			t.Errorf("cleanup notice %q does not say %q", got, want)
		}
	}
	if p.troubles["c4"].retry != nil || !strings.Contains(p.troubles["c4"].label.Text, "cannot tell whether") {
		t.Errorf("uncertain notice: %q, retry %v", p.troubles["c4"].label.Text, p.troubles["c4"].retry)
	}

	// Try again failing says so and keeps the notice.
	m.mu.Lock()
	m.fail = &control.APIError{Status: 503, Code: control.CodeUnavailable, Message: "remove computer c3: device or resource busy"}
	m.mu.Unlock()
	test.Tap(p.troubles["c3"].retry)
	h.settle()
	if r := p.troubles["c3"]; r == nil || !r.out.Visible() || r.out.Text != "Still not removed: remove computer c3: device or resource busy" {
		t.Fatalf("after a failed retry: %+v", r)
	}
	// Try again succeeding removes the session and its notice.
	m.mu.Lock()
	m.fail = nil
	m.mu.Unlock()
	test.Tap(p.troubles["c3"].retry)
	h.settle()
	h.refresh()
	wantCalls(t, m, "stop c3", "stop c3")
	if p.troubles["c3"] != nil || p.troubles["c4"] == nil {
		t.Errorf("after the removal, notices for %v, want c4 only", p.troubles)
	}
}
