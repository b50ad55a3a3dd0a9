package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// requireRunsc turns the skip of a test that needs computers under gVisor
// with the engine's checkpoints into a failure (make test-runsc sets it).
const requireRunsc = "BERTH_REQUIRE_RUNSC"

// TestMemoryComputers: on berth dev, a Docker computer with persistence
// "memory" keeps a process running across a stop and a start: the
// process the agent started before the stop is the one counting after
// it, from where it was, and the home is there. Computers in a network
// holder's namespace (COMPUTER_NETWORK_POOL, on by default) are used.
// Where the engine cannot checkpoint (computers under runc), connecting
// is refused, saying why.
func TestMemoryComputers(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	token := "memory-token-0123456789"
	env := devEnv(dir, token, "COMPUTER_NETWORK_POOL=1")
	dev := startProc(t, ctx, env, "dev", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "dev"), "--relay-listen", "127.0.0.1:0")
	url := dev.waitLine(t, regexp.MustCompile(`ready at (http://\S+)`))
	s := &super{t: t, url: url, token: token}

	agent := "mem-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	s.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
	var refused struct {
		Error struct{ Message string } `json:"error"`
	}
	if st := s.call("POST", "/v1/computers", map[string]any{"agent": agent, "provider": "docker", "persistence": "memory"}, &refused); st != 201 {
		if st != 400 || !strings.Contains(refused.Error.Message, `"memory" is not available on the docker provider`) {
			t.Fatalf("connect with memory: %d %q", st, refused.Error.Message)
		}
		testkit.Missing(t, requireRunsc, "this engine cannot suspend computers: "+refused.Error.Message, "make test-runsc")
	}
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
	pid := strings.TrimSpace(s.exec(agent, `echo kept > kept.txt
setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done' </dev/null >/dev/null 2>&1 &
echo $!`).Stdout)
	count := func() int {
		t.Helper()
		var n int
		testkit.Eventually(t, 10*time.Second, "the counter writes /tmp/count", func() bool {
			var err error
			n, err = strconv.Atoi(strings.TrimSpace(s.exec(agent, "cat /tmp/count 2>/dev/null || echo none").Stdout))
			return err == nil
		})
		return n
	}
	before := count()

	begin := time.Now()
	s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
	slept := time.Since(begin)
	var st sleepStatus
	s.must("GET", "/v1/agents/"+agent+"/computer", nil, 200, &st)
	if st.State != "sleeping" || st.Archive == nil || !st.Archive.Suspended {
		t.Fatalf("status after stop = %+v", st)
	}
	if out, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--filter", "label=dev.berth.agent="+agent).Output(); err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("a computer of the agent runs while it sleeps: %q (%v)", out, err)
	}

	begin = time.Now()
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
	after := count()
	woke := time.Since(begin)
	if after < before {
		t.Fatalf("counter %d after the wake, %d before the sleep: the process did not go on from where it was", after, before)
	}
	if x := s.exec(agent, "kill -0 "+pid+" && cat kept.txt"); x.ExitCode != 0 || x.Stdout != "kept\n" {
		t.Fatalf("after the wake, the process %s or kept.txt: %+v", pid, x)
	}
	testkit.Eventually(t, 10*time.Second, "the counter goes on after the wake", func() bool { return count() > after })
	t.Logf("suspend at stop %v; resume to the first exec answered %v", slept.Round(time.Millisecond), woke.Round(time.Millisecond))

	s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
	s.must("DELETE", "/v1/agents/"+agent+"/computer", nil, 200, nil)
	if out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label=dev.berth.agent="+agent).Output(); err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("computers of the agent left after disconnect: %q (%v)", out, err)
	}
}
