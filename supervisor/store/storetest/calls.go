package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func testCalls(t *testing.T, s store.Store) {
	ctx := testContext(t)
	c := store.Call{Key: "a1/k1", AgentID: "a1", Tool: "computer_exec", RequestHash: "h1", Owner: "sup-1", CreatedAt: t0}
	got, created, err := s.BeginCall(ctx, c)
	if err != nil || !created {
		t.Fatalf("first BeginCall: created %v, %v", created, err)
	}
	if got.State != store.CallPending || got.Key != c.Key || got.Owner != "sup-1" {
		t.Errorf("first BeginCall returned %+v", got)
	}

	// A retry, even with another hash, gets the first record.
	retry := c
	retry.RequestHash, retry.Owner, retry.CreatedAt = "h2", "sup-2", at(time.Second)
	got, created, err = s.BeginCall(ctx, retry)
	if err != nil || created {
		t.Fatalf("second BeginCall: created %v, %v", created, err)
	}
	if got.RequestHash != "h1" || got.Owner != "sup-1" || got.State != store.CallPending ||
		got.Tool != "computer_exec" || got.AgentID != "a1" || !got.CreatedAt.Equal(t0) {
		t.Errorf("second BeginCall returned %+v, want the first record", got)
	}

	wantErr(t, s.FinishCall(ctx, c.Key, "sup-2", 200, []byte(`{"x":1}`), at(2*time.Second)), store.ErrStale,
		"finish by another owner")
	if got, _ := s.GetCall(ctx, c.Key); got.State != store.CallPending {
		t.Errorf("a refused FinishCall changed the call: %+v", got)
	}
	resp := []byte(`{"exitCode":0,"stdout":"hi\n"}`)
	if err := s.FinishCall(ctx, c.Key, "sup-1", 200, resp, at(3*time.Second)); err != nil {
		t.Fatalf("finish by the owner: %v", err)
	}
	got, err = s.GetCall(ctx, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.CallDone || got.Status != 200 || string(got.Response) != string(resp) ||
		!got.FinishedAt.Equal(at(3*time.Second)) || got.RequestHash != "h1" {
		t.Errorf("finished call = %+v (response %q)", got, got.Response)
	}
	wantErr(t, s.FinishCall(ctx, c.Key, "sup-1", 500, nil, at(4*time.Second)), store.ErrStale, "second finish")
	if got, _ := s.GetCall(ctx, c.Key); got.Status != 200 {
		t.Errorf("a second FinishCall changed the outcome: %+v", got)
	}
	wantErr(t, s.FinishCall(ctx, "a1/none", "sup-1", 200, nil, t0), store.ErrStale, "finish of an unknown call")

	// A done call is replayed by BeginCall.
	got, created, err = s.BeginCall(ctx, retry)
	if err != nil || created || got.State != store.CallDone || string(got.Response) != string(resp) {
		t.Errorf("BeginCall after finish: %+v, created %v, %v", got, created, err)
	}
	_, err = s.GetCall(ctx, "a1/none")
	wantErr(t, err, store.ErrNotFound, "unknown call")

	// The agent's calls in a window, oldest first.
	for i, k := range []string{"a1/k2", "a1/k3", "a1/k4"} {
		if _, _, err := s.BeginCall(ctx, store.Call{Key: k, AgentID: "a1", Tool: "write_file", RequestHash: "h", Owner: "sup-1", CreatedAt: at(time.Duration(i+1) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.BeginCall(ctx, store.Call{Key: "b1/k1", AgentID: "b1", Tool: "exec", RequestHash: "h", Owner: "sup-1", CreatedAt: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	calls, err := s.AgentCalls(ctx, "a1", at(30*time.Second), at(3*time.Minute), 10)
	if err != nil || len(calls) != 2 || calls[0].Key != "a1/k2" || calls[1].Key != "a1/k3" {
		t.Errorf("AgentCalls(a1, 30 s, 3 min) = %+v, %v; want a1/k2, a1/k3", calls, err)
	}
	if calls, err := s.AgentCalls(ctx, "a1", t0, at(time.Hour), 2); err != nil || len(calls) != 2 || calls[0].Key != "a1/k1" {
		t.Errorf("AgentCalls with limit 2 = %+v, %v", calls, err)
	}
}

func testPurgeCalls(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for i := range 5 {
		c := store.Call{Key: fmt.Sprintf("k%d", i), AgentID: "a1", Tool: "computer_exec", RequestHash: "h",
			Owner: "sup-1", CreatedAt: at(time.Duration(i) * time.Hour)}
		if _, _, err := s.BeginCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PurgeCalls(ctx, at(2*time.Hour)) // k0, k1; k2 was created exactly then
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("purged %d calls, want 2", n)
	}
	for i := range 5 {
		_, err := s.GetCall(ctx, fmt.Sprintf("k%d", i))
		if gone := errors.Is(err, store.ErrNotFound); gone != (i < 2) {
			t.Errorf("k%d: %v after purge", i, err)
		}
	}
	if n, err := s.PurgeCalls(ctx, at(2*time.Hour)); err != nil || n != 0 {
		t.Errorf("second purge: %d, %v", n, err)
	}
	// A purged key starts afresh.
	_, created, err := s.BeginCall(ctx, store.Call{Key: "k0", AgentID: "a1", Tool: "computer_stop", Owner: "sup-2", CreatedAt: at(5 * time.Hour)})
	if err != nil || !created {
		t.Errorf("BeginCall of a purged key: created %v, %v", created, err)
	}
}

func testHeartbeat(t *testing.T, s store.Store) {
	ctx := testContext(t)
	alive := func(id string, cutoff time.Time) bool {
		t.Helper()
		ok, err := s.InstanceAlive(ctx, id, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if alive("sup-1", t0.Add(-time.Hour)) {
		t.Error("an instance that never beat is alive")
	}
	if err := s.Heartbeat(ctx, "sup-1", t0); err != nil {
		t.Fatal(err)
	}
	if !alive("sup-1", t0) {
		t.Error("not alive at the cutoff of its beat")
	}
	if alive("sup-1", at(time.Millisecond)) {
		t.Error("alive after a cutoff past its last beat")
	}
	if err := s.Heartbeat(ctx, "sup-1", at(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !alive("sup-1", at(5*time.Second)) {
		t.Error("a second beat did not count")
	}
	if alive("sup-2", t0) {
		t.Error("another instance is alive through sup-1's beats")
	}
}

func testClaimSession(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "a1", "default", "docker", 300, 1000)
	reserve(t, s, "a1", "s1", t0)
	claim := func(owner string, now, until time.Time) bool {
		t.Helper()
		ok, err := s.ClaimSession(ctx, "s1", owner, now, until)
		if err != nil {
			t.Fatalf("claim by %s: %v", owner, err)
		}
		return ok
	}
	if !claim("sup-a", t0, at(30*time.Second)) {
		t.Fatal("first claim refused")
	}
	if claim("sup-b", at(10*time.Second), at(40*time.Second)) {
		t.Error("another owner claimed while the claim runs")
	}
	if !claim("sup-a", at(10*time.Second), at(40*time.Second)) {
		t.Error("the owner could not renew its claim")
	}
	if claim("sup-b", at(39*time.Second), at(70*time.Second)) {
		t.Error("another owner claimed before the renewed claim ran out")
	}
	if !claim("sup-b", at(40*time.Second), at(70*time.Second)) {
		t.Error("another owner could not claim once the claim ran out")
	}
	x, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if x.Owner != "sup-b" || !x.ClaimUntil.Equal(at(70*time.Second)) {
		t.Errorf("claim stored as %s until %s, want sup-b until %s", x.Owner, x.ClaimUntil, at(70*time.Second))
	}
	if claim("sup-a", at(50*time.Second), at(80*time.Second)) {
		t.Error("the first owner took the session back during another's claim")
	}
	ok, err := s.ClaimSession(ctx, "ghost", "sup-a", t0, at(time.Minute))
	if err != nil || ok {
		t.Errorf("claim of an unknown session: %v, %v", ok, err)
	}
	// Taking over from a dead owner works only from the current owner.
	if ok, err := s.TakeSession(ctx, "s1", "sup-a", "sup-c", at(90*time.Second)); err != nil || ok {
		t.Errorf("take over from a former owner: %v, %v", ok, err)
	}
	if ok, err := s.TakeSession(ctx, "s1", "sup-b", "sup-c", at(90*time.Second)); err != nil || !ok {
		t.Errorf("take over from the owner: %v, %v", ok, err)
	}
	if x, _ := s.GetSession(ctx, "s1"); x.Owner != "sup-c" || !x.ClaimUntil.Equal(at(90*time.Second)) {
		t.Errorf("after take over: %s until %s", x.Owner, x.ClaimUntil)
	}

	// Concurrent claims of a free session: exactly one owner wins.
	connect(t, s, "a2", "default", "docker", 300, 1000)
	reserve(t, s, "a2", "s2", at(time.Hour))
	const owners = 20
	wins := make([]bool, owners)
	var wg sync.WaitGroup
	for i := range owners {
		wg.Go(func() {
			ok, err := s.ClaimSession(ctx, "s2", fmt.Sprintf("sup-%d", i), at(time.Hour), at(time.Hour+time.Minute))
			if err != nil {
				t.Errorf("claim by sup-%d: %v", i, err)
			}
			wins[i] = ok
		})
	}
	wg.Wait()
	n := 0
	for _, w := range wins {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d owners claimed one free session at once, want 1", n)
	}
}

func testMeta(t *testing.T, s store.Store) {
	ctx := testContext(t)
	v, err := s.Meta(ctx, "deployment", "d-1")
	if err != nil || v != "d-1" {
		t.Fatalf("first Meta: %q, %v", v, err)
	}
	v, err = s.Meta(ctx, "deployment", "d-2")
	if err != nil || v != "d-1" {
		t.Errorf("second Meta: %q, %v, want the first writer's d-1", v, err)
	}
	const writers = 20
	got := make([]string, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			v, err := s.Meta(ctx, "race", fmt.Sprintf("v%d", i))
			if err != nil {
				t.Errorf("Meta by writer %d: %v", i, err)
			}
			got[i] = v
		})
	}
	wg.Wait()
	for i, v := range got {
		if v != got[0] || v == "" {
			t.Fatalf("concurrent Meta gave %q to writer %d and %q to writer 0", v, i, got[0])
		}
	}
}
