package main

import (
	"net/http"
	"strings"
	"testing"
)

func TestPreview(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/ports/8080/preview", http.StatusCreated,
		`{"url":"http://127.0.0.1:8080/p/s1.8080.1735787945.abc/","port":8080,"expiresAt":"2025-01-02T03:19:05Z"}`)
	run(t, "", "computer", "preview", "--agent", "a1", "8080").
		want(t, 0, "http://127.0.0.1:8080/p/s1.8080.1735787945.abc/\nport 8080 of agent a1's computer, until 2025-01-02T03:19:05Z\n", "")
	if c := s.only(t); c.Method != "POST" {
		t.Errorf("request = %+v", c)
	}
	for _, bad := range []string{"0", "http", "70000"} {
		if r := run(t, "", "computer", "preview", "--agent", "a1", bad); r.code != exitUsage || !strings.Contains(r.stderr, "want a TCP port") {
			t.Errorf("preview %s: %+v", bad, r)
		}
	}
}
