package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPDrivesDockerComputer runs `berth mcp` over stdio, as an agent's MCP
// client would, and drives a real Docker computer through the five tools
// with the go-sdk's client.
func TestMCPDrivesDockerComputer(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	s := startSupervisor(t, "berth/test:latest")
	connect(s, "mcp")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.Command(berthBin, "mcp", "--agent", "mcp")
	cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "browser_click,browser_evaluate,browser_navigate,browser_press,browser_screenshot,browser_scroll,browser_snapshot,browser_tabs,browser_type,browser_wait_for,computer_action,computer_checkpoint,computer_exec,computer_read_file,computer_screenshot,computer_start,computer_stop,computer_write_file" {
		t.Fatalf("tools: %s", got)
	}
	call := func(name string, args any) (*mcp.CallToolResult, string) {
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
		return res, text
	}
	if res, text := call("computer_start", map[string]any{}); res.IsError || !strings.Contains(text, "running") {
		t.Fatalf("start: %s", text)
	}
	res, _ := call("computer_exec", map[string]any{"command": "uname -s; id -u"})
	var x execResult
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &x)
	if res.IsError || x.ExitCode != 0 || x.Stdout != "Linux\n1000\n" {
		t.Fatalf("exec: %s", raw)
	}
	if res, text := call("computer_write_file", map[string]any{"path": "mcp.txt", "content": "written over MCP\n"}); res.IsError || !strings.Contains(text, "sha256") {
		t.Fatalf("write: %s", text)
	}
	if res, text := call("computer_read_file", map[string]any{"path": "mcp.txt"}); res.IsError || !strings.Contains(text, "written over MCP") {
		t.Fatalf("read: %s", text)
	}
	if res, text := call("computer_exec", map[string]any{"command": "true", "timeoutSeconds": 121}); !res.IsError || !strings.Contains(text, "120") {
		t.Fatalf("exec over the limit: error=%v %s", res.IsError, text)
	}
	if res, text := call("computer_stop", map[string]any{}); res.IsError || !strings.Contains(text, "stopped") {
		t.Fatalf("stop: %s", text)
	}
	if res, text := call("computer_exec", map[string]any{"command": "true"}); !res.IsError || !strings.Contains(text, "no_session") {
		t.Fatalf("exec after stop: error=%v %s", res.IsError, text)
	}
}
