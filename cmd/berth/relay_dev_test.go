package main

import "testing"

func TestLoopbackURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://[::]:8081/v1/agents/connect":       "ws://127.0.0.1:8081/v1/agents/connect",
		"ws://0.0.0.0:8081/v1/agents/connect":    "ws://127.0.0.1:8081/v1/agents/connect",
		"ws://127.0.0.1:8081/v1/agents/connect":  "ws://127.0.0.1:8081/v1/agents/connect",
		"ws://192.0.2.10:8081/v1/agents/connect": "ws://192.0.2.10:8081/v1/agents/connect",
	} {
		if got := loopbackURL(in); got != want {
			t.Errorf("loopbackURL(%q) = %q, want %q", in, got, want)
		}
	}
}
