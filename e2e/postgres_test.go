package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
)

// TestTwoSupervisorsOnePostgres runs two supervisor processes on one
// PostgreSQL database and the same Docker engine. Starts for the same agents
// sent to both at once make one computer per agent; both serve its tools;
// and when the sessions expire, each is reaped and billed exactly once.
func TestTwoSupervisorsOnePostgres(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	url := pgtest.Start(t)
	dir := t.TempDir()
	env := []string{"COMPUTER_TOKEN_SECRET=two-supervisors-share-this-secret-0123456789"}
	a := runSupervisorArgs(t, dir, []string{"--store", url}, env...)
	b := runSupervisorArgs(t, dir, []string{"--store", url}, env...)
	const agents = 8
	for i := range agents {
		id := fmt.Sprintf("pg%d", i)
		a.must("POST", "/v1/agents", map[string]any{"id": id, "name": id, "workspace": "shared"}, 201, nil)
		b.must("POST", "/v1/computers", map[string]any{"agent": id, "provider": "docker", "leaseSeconds": 60, "dailySeconds": 600}, 201, nil)
	}
	var wg sync.WaitGroup
	ids := make([][2]string, agents)
	for i := range agents {
		for j, p := range []*proc{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var s session
				code, err := p.call("POST", fmt.Sprintf("/v1/agents/pg%d/computer/start", i), fmt.Sprintf("start-%d-%d", i, j), nil, &s)
				if err != nil || code != 200 {
					t.Errorf("start pg%d on supervisor %d: %d %v", i, j, code, err)
				}
				ids[i][j] = s.ID
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, pair := range ids {
		if pair[0] == "" || pair[0] != pair[1] {
			t.Fatalf("agent pg%d: the supervisors answered sessions %q and %q, want one", i, pair[0], pair[1])
		}
	}
	dep := a.deployment()
	if n := countContainers(t, dep); n != agents {
		t.Fatalf("%d containers for %d agents", n, agents)
	}
	// Either supervisor serves any computer.
	for i := range agents {
		var x execResult
		p := []*proc{a, b}[i%2]
		p.must("POST", fmt.Sprintf("/v1/agents/pg%d/computer/exec", i), map[string]any{"command": "echo hi"}, 200, &x)
		if x.Stdout != "hi\n" {
			t.Fatalf("exec on pg%d: %+v", i, x)
		}
	}
	// Both reapers race for the expiries.
	deadline := time.Now().Add(150 * time.Second)
	for countContainers(t, dep) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sessions not reaped: %s", deploymentObjects(t, dep))
		}
		time.Sleep(time.Second)
	}
	waitGone(t, dep)
	for i := range agents {
		var st status
		a.must("GET", fmt.Sprintf("/v1/agents/pg%d/computer", i), nil, 200, &st)
		if st.Session != nil || st.Budget.UsedSeconds != 60 || st.Budget.ReservedSeconds != 0 {
			t.Fatalf("pg%d after expiry: session %+v budget %+v", i, st.Session, st.Budget)
		}
	}
	var usage struct {
		Rows []struct {
			Key      string `json:"key"`
			Seconds  int64  `json:"seconds"`
			Sessions int64  `json:"sessions"`
		} `json:"rows"`
	}
	b.must("GET", "/v1/usage?by=workspace", nil, 200, &usage)
	if len(usage.Rows) != 1 || usage.Rows[0].Seconds != agents*60 || usage.Rows[0].Sessions != agents {
		t.Fatalf("usage %+v, want %d sessions of 60 s", usage.Rows, agents)
	}
	// A container is gone a moment before its supervisor logs it, so the
	// counts may lag the engine: wait for them (bounded), then require
	// exactly one reap and one destroy per session.
	var expired, destroyed int
	testkit.Poll(10*time.Second, func() bool {
		expired = strings.Count(a.logs.String(), `msg="session expired"`) + strings.Count(b.logs.String(), `msg="session expired"`)
		destroyed = strings.Count(a.logs.String(), `msg="computer destroyed"`) + strings.Count(b.logs.String(), `msg="computer destroyed"`)
		return expired >= agents && destroyed >= agents
	})
	if expired != agents || destroyed != agents {
		t.Fatalf("reaped %d times and destroyed %d times for %d sessions: double work", expired, destroyed, agents)
	}
}

func countContainers(t *testing.T, dep string) int {
	t.Helper()
	left := deploymentObjects(t, dep)
	for _, part := range strings.Split(left, "; ") {
		if names, ok := strings.CutPrefix(part, "ps: "); ok {
			return len(strings.Split(names, ","))
		}
	}
	return 0
}
