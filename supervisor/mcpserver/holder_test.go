package mcpserver

import (
	"strings"
	"testing"
)

// TestDesktopHolder: the desktop tools name one holder per server in
// their calls, the same on every call, another for another server; the
// other tools name none.
func TestDesktopHolder(t *testing.T) {
	f := newFakeSupervisor(t)
	f.ok("POST /v1/agents/"+testAgent+"/computer/desktop/action", `{"action": "cursor_position", "cursor": [1, 2], "screenWidth": 1280, "screenHeight": 720, "scale": 1}`)
	f.ok("POST /v1/agents/"+testAgent+"/computer/exec", `{"exitCode": 0}`)
	holders := map[string]bool{}
	for range 2 {
		cs := connectInMemory(t, newTestServer(t, f))
		for range 2 {
			if res := callTool(t, cs, ToolAction, map[string]any{"action": "cursor_position"}); res.IsError {
				t.Fatalf("computer_action: %s", text(res))
			}
			holders[f.last(t).Holder] = true
		}
		callTool(t, cs, ToolExec, map[string]any{"command": "true"})
		if h := f.last(t).Holder; h != "" {
			t.Errorf("computer_exec named desktop holder %q", h)
		}
	}
	if len(holders) != 2 {
		t.Fatalf("holders %v: want one per server", holders)
	}
	for h := range holders {
		if !strings.HasPrefix(h, "mcp-") || len(h) > 64 {
			t.Errorf("holder %q: want mcp- and a random id, at most 64 characters", h)
		}
	}
}
