package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestKeyCreate(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/keys", http.StatusCreated, `{"id":"kabc","name":"a1","scope":"agent","workspace":"w1","agent":"a1","createdAt":"2026-01-01T00:00:00Z","key":"berth_k_kabc_s3cr3t"}`)
	r := run(t, "", "key", "create", "--scope", "agent", "--agent", "a1", "--expires", "1h")
	if r.code != 0 || r.stdout != "berth_k_kabc_s3cr3t\n" || !strings.Contains(r.stderr, "shown only this once") {
		t.Fatalf("%+v", r)
	}
	var body map[string]any
	json.Unmarshal([]byte(s.only(t).Body), &body)
	if body["scope"] != "agent" || body["agent"] != "a1" || body["name"] != "a1" || body["expiresInSeconds"] != float64(3600) {
		t.Errorf("body = %v", body)
	}
}

func TestKeyListAndRevoke(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/keys", http.StatusOK, `{"keys":[{"id":"kabc","name":"ci","scope":"workspace","workspace":"w1","createdAt":"2026-01-01T00:00:00Z","revokedAt":"2026-01-02T00:00:00Z"}]}`)
	r := run(t, "", "key", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, "kabc") || !strings.Contains(r.stdout, "revoked") || strings.Contains(r.stdout, "secret") {
		t.Fatalf("%+v", r)
	}
	s.on("DELETE /v1/keys/kabc", http.StatusOK, `{"id":"kabc","revoked":true}`)
	run(t, "", "key", "revoke", "kabc").want(t, 0, "key kabc revoked\n", "")
}

// berth mcp sends the agent key of BERTH_AGENT_KEY instead of the operator
// token.
func TestMCPUsesAgentKey(t *testing.T) {
	s := newSupervisor(t)
	t.Setenv("BERTH_AGENT_KEY", "berth_k_kabc_s3cr3t")
	s.on("GET /v1/agents/a1/computer", http.StatusOK, `{}`)
	r := run(t, "", "mcp", "--agent", "a1")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	calls := s.requests()
	if len(calls) == 0 || calls[0].Auth != "Bearer berth_k_kabc_s3cr3t" {
		t.Errorf("calls = %+v, want the agent key", calls)
	}
}
