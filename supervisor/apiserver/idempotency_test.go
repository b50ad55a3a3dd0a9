package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// keyed posts body with an Idempotency-Key and returns status, the
// replayed header and the raw answer.
func (e *env) keyed(path, key string, body any) (int, bool, []byte) {
	e.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", e.srv.URL+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", out
}

func TestIdempotentExecRunsOnce(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	cmd := map[string]any{"command": "echo run >> count; wc -l < count"}
	st1, rep1, out1 := e.keyed("/v1/agents/a1/computer/exec", "k1", cmd)
	st2, rep2, out2 := e.keyed("/v1/agents/a1/computer/exec", "k1", cmd)
	if st1 != 200 || st2 != 200 || rep1 || !rep2 || !bytes.Equal(out1, out2) {
		t.Fatalf("replay: %d %v %s / %d %v %s", st1, rep1, out1, st2, rep2, out2)
	}
	var x supervisor.ExecResult
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "wc -l < count"}, 200, &x)
	if strings.TrimSpace(x.Stdout) != "1" {
		t.Fatalf("the command ran %s times, want 1", x.Stdout)
	}
	// The same key with another request is refused.
	st, _, out := e.keyed("/v1/agents/a1/computer/exec", "k1", map[string]any{"command": "echo other"})
	if st != 409 || !strings.Contains(string(out), "different request") {
		t.Fatalf("key reuse: %d %s", st, out)
	}
	// The same key for another agent is another call.
	e.connect("a2", 300, 3600)
	e.mustCall("POST", "/v1/agents/a2/computer/start", nil, 200, nil)
	if st, rep, _ := e.keyed("/v1/agents/a2/computer/exec", "k1", cmd); st != 200 || rep {
		t.Fatalf("same key, other agent: %d replayed=%v", st, rep)
	}
}

func TestIdempotentDuplicateWaitsForFirst(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	cmd := map[string]any{"command": "sleep 1; echo run >> slow; wc -l < slow"}
	var wg sync.WaitGroup
	outs := make([][]byte, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, outs[i] = e.keyed("/v1/agents/a1/computer/exec", "slow-key", cmd)
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	for i := range outs {
		if !bytes.Equal(outs[i], outs[0]) {
			t.Fatalf("answers differ: %s vs %s", outs[i], outs[0])
		}
	}
	var x supervisor.ExecResult
	json.Unmarshal(outs[0], &x)
	if strings.TrimSpace(x.Stdout) != "1" {
		t.Fatalf("ran %q times, want 1", x.Stdout)
	}
}

func TestIdempotentStartCreatesOnce(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	_, _, a := e.keyed("/v1/agents/a1/computer/start", "s1", nil)
	_, rep, b := e.keyed("/v1/agents/a1/computer/start", "s1", nil)
	if !rep || !bytes.Equal(a, b) {
		t.Fatalf("start replay: %v %s %s", rep, a, b)
	}
	if c, _ := e.fake.Counts(); c != 1 {
		t.Fatalf("creates = %d", c)
	}
}

func TestLostExecIsUncertainAndNotRerun(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)
	cmd := map[string]any{"command": "echo run >> lost"}
	// A supervisor that died while running this call left it pending.
	key := "lost-key"
	raw, _ := json.Marshal(supervisor.ExecRequest{Command: "echo run >> lost"})
	hash := requestHash("exec", raw)
	if _, created, err := e.st.BeginCall(context.Background(), store.Call{
		Key: "a1/" + key, AgentID: "a1", Tool: "exec", RequestHash: hash, Owner: "i_dead", CreatedAt: e.clock.Now(),
	}); err != nil || !created {
		t.Fatalf("seed pending call: %v", err)
	}
	st, rep, out := e.keyed("/v1/agents/a1/computer/exec", key, cmd)
	var x supervisor.ExecResult
	json.Unmarshal(out, &x)
	if st != 200 || !rep || !x.Uncertain || !strings.Contains(x.Advice, "Inspect") {
		t.Fatalf("lost call: %d replayed=%v %s", st, rep, out)
	}
	var check supervisor.ExecResult
	e.mustCall("POST", "/v1/agents/a1/computer/exec", map[string]any{"command": "cat lost 2>/dev/null | wc -l"}, 200, &check)
	if strings.TrimSpace(check.Stdout) != "0" {
		t.Fatalf("a lost command was re-run: %q", check.Stdout)
	}
	// Retries keep answering the same.
	if _, _, again := e.keyed("/v1/agents/a1/computer/exec", key, cmd); !bytes.Equal(again, out) {
		t.Fatalf("second retry: %s", again)
	}
}

func TestIdempotencyKeyLimits(t *testing.T) {
	e := newEnv(t)
	e.connect("a1", 300, 3600)
	st, _, out := e.keyed("/v1/agents/a1/computer/start", strings.Repeat("k", 201), nil)
	if st != 400 || !strings.Contains(string(out), "Idempotency-Key") {
		t.Fatalf("long key: %d %s", st, out)
	}
}
