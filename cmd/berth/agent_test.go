package main

import (
	"net/http"
	"testing"
)

func TestAgentCreate(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents", http.StatusCreated, `{"id":"research-1","name":"researcher","workspace":"lab","createdAt":"2025-01-02T03:04:05Z"}`)
	run(t, "", "agent", "create", "researcher", "--id", "research-1", "--workspace", "lab").
		want(t, 0, "created agent research-1 (researcher) in workspace lab\n", "")
	c := s.only(t)
	if c.Method != "POST" || c.Path != "/v1/agents" {
		t.Errorf("request = %s %s", c.Method, c.Path)
	}
	jsonEqual(t, c.Body, `{"id":"research-1","name":"researcher","workspace":"lab"}`)
}

func TestAgentCreateJSON(t *testing.T) {
	s := newSupervisor(t)
	answer := `{"id":"a7","name":"n","workspace":"default","createdAt":"2025-01-02T03:04:05Z"}`
	s.on("POST /v1/agents", http.StatusCreated, answer)
	r := run(t, "", "agent", "create", "n", "--json")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	jsonEqual(t, r.stdout, answer)
	jsonEqual(t, s.only(t).Body, `{"name":"n"}`)
}
