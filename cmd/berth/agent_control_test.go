package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentOwnerCommandsWithoutAgent: with no lending agent at the
// socket, the owner's commands say where they looked and what starts one;
// a malformed setting is refused before any call, naming the key and what
// it takes.
func TestAgentOwnerCommandsWithoutAgent(t *testing.T) {
	data := t.TempDir()
	sock := filepath.Join(data, "agent.sock")
	for _, args := range [][]string{{"status"}, {"sessions"}, {"lend", "off"}, {"settings"}, {"usage"}, {"cleanups"}, {"approvals"}} {
		r := run(t, "", append(append([]string{"agent"}, args...), "--data", data)...)
		if r.code != 1 || !strings.Contains(r.stderr, "no lending agent answers at "+sock+": start it with berth agent run") {
			t.Errorf("berth agent %s with no agent: %d %q", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	for _, c := range []struct{ args, want string }{
		{"lend maybe", `lend: "maybe": want on or off`},
		{"settings cpus=two", `cpus="two": want a number such as 1.5`},
		{"settings maxComputers=1.5", `maxComputers="1.5": want a whole number`},
		{"settings colour=blue", `"colour=blue": want KEY=VALUE with KEY one of lending, maxComputers, cpus`},
		{"usage --days 0", `--days: 0 is outside 1..90`},
		{"cleanup drop c1", `cleanup: "drop": want remove or keep`},
	} {
		r := run(t, "", append(append([]string{"agent"}, strings.Fields(c.args)...), "--data", data)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("berth agent %s: %d %q, want exit %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}
