package main

import (
	"net/http"
	"strings"
	"testing"
)

func TestComputerView(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/view", http.StatusCreated,
		`{"session":"s_1","viewer":"w1","token":"v1.x","url":"http://127.0.0.1:8080/view/s_1?token=v1.x","expiresAt":"2026-12-01T08:00:00Z","desktopUsers":2,"viewers":1}`)
	r := run(t, "", "computer", "view", "--agent", "a1")
	if r.code != 0 || r.stdout != "http://127.0.0.1:8080/view/s_1?token=v1.x\n" {
		t.Fatalf("%+v", r)
	}
	if !strings.Contains(r.stderr, "session s_1 (viewer 1 of 2)") {
		t.Errorf("stderr %q", r.stderr)
	}
	if c := s.only(t); c.Auth != "Bearer "+testToken || c.Method != "POST" {
		t.Errorf("call %+v", c)
	}
}

func TestComputerViewBusy(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/view", http.StatusConflict,
		`{"error":{"code":"desktop_busy","message":"the desktop of session s_1 already has 2 viewers (DESKTOP_USERS is 2); try again when one leaves"}}`)
	run(t, "", "computer", "view", "--agent", "a1").
		want(t, exitFailure, "", "berth: the desktop of session s_1 already has 2 viewers (DESKTOP_USERS is 2); try again when one leaves (desktop_busy)\n")
}
