package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPWithAgentKey runs `berth mcp` with an agent key and no operator
// token: it drives its own agent's computer, is refused another agent's,
// and is refused at once once the key is revoked.
func TestMCPWithAgentKey(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	s := startSupervisor(t, "berth/test:latest")
	connect(s, "keyed")
	connect(s, "other")
	var key struct{ ID, Key string }
	s.must("POST", "/v1/keys", map[string]any{"name": "keyed", "scope": "agent", "agent": "keyed"}, 201, &key)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	serve := func(agent string) *mcp.ClientSession {
		cmd := exec.Command(berthBin, "mcp", "--agent", agent)
		cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN=", "BERTH_AGENT_KEY="+key.Key)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession, name string, args any) (bool, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var parts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
		text := strings.Join(parts, "\n")
		t.Logf("%s -> error=%v %s", name, res.IsError, text)
		return res.IsError, text
	}
	own := serve("keyed")
	if isErr, text := call(own, "computer_start", map[string]any{}); isErr || !strings.Contains(text, "running") {
		t.Fatalf("start with the agent key: %s", text)
	}
	if isErr, text := call(own, "computer_exec", map[string]any{"command": "echo keyed"}); isErr || !strings.Contains(text, "keyed") {
		t.Fatalf("exec with the agent key: %s", text)
	}
	if isErr, text := call(serve("other"), "computer_start", map[string]any{}); !isErr || !strings.Contains(text, "forbidden") {
		t.Fatalf("another agent's computer: error=%v %s", isErr, text)
	}
	s.must("DELETE", "/v1/keys/"+key.ID, nil, 200, nil)
	if isErr, text := call(own, "computer_exec", map[string]any{"command": "true"}); !isErr || !strings.Contains(text, "unauthorized") {
		t.Fatalf("exec after revocation: error=%v %s", isErr, text)
	}
	s.must("POST", "/v1/agents/keyed/computer/stop", nil, 200, nil)
}
