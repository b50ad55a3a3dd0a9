package mcpserver

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
)

const checkpointAnswer = `{"name":"before-upgrade","bytes":1536000,"createdAt":"2025-01-02T03:10:00Z","image":"headless"}`

func TestCheckpointTools(t *testing.T) {
	transports(t, func(t *testing.T, f *fakeSupervisor, cs *mcp.ClientSession) {
		f.ok("POST "+computerPath+"/checkpoints", checkpointAnswer)
		f.ok("POST "+computerPath+"/start", runningSession)

		res := callTool(t, cs, ToolCheckpoint, map[string]any{"name": "before-upgrade"})
		want := "Saved checkpoint before-upgrade: 1.5 MB of the home folder, made on image headless at 2025-01-02T03:10:00Z. The computer keeps running."
		if res.IsError || !strings.HasPrefix(text(res), want) || !strings.Contains(text(res), `computer_start with checkpoint "before-upgrade"`) {
			t.Errorf("checkpoint text = %q", text(res))
		}
		var a api.Archive
		structured(t, res, &a)
		if a.Name != "before-upgrade" || a.Bytes != 1536000 || a.Image != "headless" {
			t.Errorf("checkpoint structured = %+v", a)
		}
		c := f.last(t)
		if c.Method != "POST" || c.Path != computerPath+"/checkpoints" || c.Auth != "Bearer "+testToken {
			t.Errorf("checkpoint request = %+v", c)
		}
		jsonEqual(t, c.Body, `{"name":"before-upgrade"}`)

		res = callTool(t, cs, ToolStart, map[string]any{"checkpoint": "before-upgrade"})
		if res.IsError || !strings.Contains(text(res), "Computer running: session s1") ||
			!strings.Contains(text(res), "Started from checkpoint before-upgrade: the files of its home folder are back; no process from before runs.") {
			t.Errorf("start from a checkpoint: %q", text(res))
		}
		jsonEqual(t, f.last(t).Body, `{"checkpoint":"before-upgrade"}`)

		// A start without a checkpoint sends no body and says nothing of one.
		res = callTool(t, cs, ToolStart, map[string]any{})
		if res.IsError || strings.Contains(text(res), "checkpoint") || f.last(t).Body != "" {
			t.Errorf("start: %q, body %q", text(res), f.last(t).Body)
		}

		// Every call carried its own key, derived from the call.
		keys := map[string]bool{}
		for _, c := range f.requests() {
			if !strings.HasPrefix(c.Key, "mcp-") || len(c.Key) != 68 || keys[c.Key] {
				t.Errorf("Idempotency-Key %q of %s is not a fresh derived key", c.Key, c.Path)
			}
			keys[c.Key] = true
		}

		// The supervisor refuses a checkpoint of a computer that keeps
		// nothing; the model reads why.
		f.on("POST "+computerPath+"/checkpoints", answer{status: http.StatusConflict,
			body: `{"error":{"code":"conflict","message":"agent \"a1\"'s computer does not keep its files (persistence \"none\"); checkpoints need persistence \"home\""}}`})
		res = callTool(t, cs, ToolCheckpoint, map[string]any{"name": "x"})
		if !res.IsError || !strings.Contains(text(res), `computer_checkpoint failed: agent "a1"'s computer does not keep its files`) || !strings.Contains(text(res), "(code conflict, HTTP 409)") {
			t.Errorf("checkpoint of a computer that keeps nothing = %v %q", res.IsError, text(res))
		}
	})
}

func TestCheckpointLimits(t *testing.T) {
	f := newFakeSupervisor(t)
	cs := connectInMemory(t, newTestServer(t, f))
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{ToolCheckpoint, map[string]any{"name": ""}, "name: required"},
		{ToolCheckpoint, map[string]any{"name": strings.Repeat("c", MaxCheckpointNameChars+1)}, "name: 65 characters, at most 64"},
		{ToolCheckpoint, map[string]any{"name": "-x"}, `name: "-x" must be letters, digits`},
		{ToolCheckpoint, map[string]any{"name": "a/b"}, `name: "a/b" must be letters`},
		{ToolCheckpoint, map[string]any{}, "name"},
		{ToolCheckpoint, map[string]any{"name": "x", "keep": true}, "keep"},
		{ToolStart, map[string]any{"checkpoint": ".."}, `checkpoint: ".." must be letters`},
		{ToolStart, map[string]any{"checkpoint": "é"}, `checkpoint: "é" must be letters`},
	}
	for _, tt := range tests {
		res := callTool(t, cs, tt.tool, tt.args)
		if !res.IsError || !strings.Contains(text(res), tt.want) {
			t.Errorf("%s %v = %v %q, want an error with %q", tt.tool, tt.args, res.IsError, text(res), tt.want)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests reached the supervisor for refused calls", n)
	}
	// At the limit the call goes through.
	f.ok("POST "+computerPath+"/checkpoints", checkpointAnswer)
	name := "a" + strings.Repeat("._-9", (MaxCheckpointNameChars-1)/4)
	if res := callTool(t, cs, ToolCheckpoint, map[string]any{"name": name}); res.IsError {
		t.Errorf("checkpoint %q: %q", name, text(res))
	}
}

// TestCheckpointWake: with a real supervisor that keeps archives, a
// checkpoint taken over MCP brings back the home's files as they were when
// computer_start starts from it, and a plain start wakes from the last
// sleep.
func TestCheckpointWake(t *testing.T) {
	sup := realSupervisor(t, supervisor.ConnectRequest{Persistence: api.PersistenceHome})
	c, err := api.New(sup.URL, testToken, api.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cs := connectInMemory(t, New(c, testAgent, WithLogger(testLogger(t))))
	ok := func(name string, args any) string {
		t.Helper()
		res := callTool(t, cs, name, args)
		if res.IsError {
			t.Fatalf("%s: %s", name, text(res))
		}
		return text(res)
	}
	ok(ToolStart, nil)
	ok(ToolWriteFile, map[string]any{"path": "notes.txt", "content": "first"})
	if got := ok(ToolCheckpoint, map[string]any{"name": "v1"}); !strings.HasPrefix(got, "Saved checkpoint v1: ") {
		t.Errorf("checkpoint: %q", got)
	}
	ok(ToolWriteFile, map[string]any{"path": "notes.txt", "content": "second"})
	ok(ToolWriteFile, map[string]any{"path": "later.txt", "content": "later"})

	// A start from a checkpoint is refused while the computer runs.
	res := callTool(t, cs, ToolStart, map[string]any{"checkpoint": "v1"})
	if !res.IsError || !strings.Contains(text(res), "stop it before starting from checkpoint") {
		t.Errorf("start from a checkpoint while running = %v %q", res.IsError, text(res))
	}
	// The name is taken.
	res = callTool(t, cs, ToolCheckpoint, map[string]any{"name": "v1"})
	if !res.IsError || !strings.Contains(text(res), "exists") {
		t.Errorf("a second checkpoint v1 = %v %q", res.IsError, text(res))
	}

	ok(ToolStop, nil)
	if got := ok(ToolStart, map[string]any{"checkpoint": "v1"}); !strings.Contains(got, "Started from checkpoint v1") {
		t.Errorf("start from v1: %q", got)
	}
	if got := ok(ToolReadFile, map[string]any{"path": "notes.txt"}); got != "first" {
		t.Errorf("notes.txt after the wake from v1 = %q, want first", got)
	}
	if got := ok(ToolExec, map[string]any{"command": "test -e later.txt && echo kept || echo gone"}); !strings.Contains(got, "gone") {
		t.Errorf("a file written after the checkpoint: %q", got)
	}

	// A plain start after a stop wakes from the last sleep.
	ok(ToolWriteFile, map[string]any{"path": "notes.txt", "content": "third"})
	ok(ToolStop, nil)
	ok(ToolStart, nil)
	if got := ok(ToolReadFile, map[string]any{"path": "notes.txt"}); got != "third" {
		t.Errorf("notes.txt after the wake from the sleep = %q, want third", got)
	}
}
