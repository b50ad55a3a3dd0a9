package mcpserver

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// realSupervisor serves the supervisor's API over the fake provider, with
// testAgent connected to it, until the test ends.
func realSupervisor(t *testing.T) (*httptest.Server, *fake.Provider, store.Store) {
	t.Helper()
	return realSupervisorWith(t, nil, supervisor.ConnectRequest{Agent: testAgent})
}

// realSupervisorWith is realSupervisor with a configuration changed by
// configure (when set) and testAgent connected by conn.
func realSupervisorWith(t *testing.T, configure func(*supervisor.Config), conn supervisor.ConnectRequest) (*httptest.Server, *fake.Provider, store.Store) {
	t.Helper()
	ctx := testContext(t)
	dir := t.TempDir()
	st, err := sqlstore.OpenSQLite(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := secrets.LoadOrCreateKeyFile(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	box, err := secrets.NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.NewDeriver([]byte(strings.Repeat("t", token.MinSecretLen)))
	if err != nil {
		t.Fatal(err)
	}
	fp := fake.New(filepath.Join(dir, "machines"), nil)
	log := testLogger(t)
	cfg := supervisor.Config{Store: st, Providers: map[string]providers.Provider{fake.ID: fp},
		DefaultProvider: fake.ID, Box: box, Tokens: tokens, Logger: log, ReadyTimeout: 5 * time.Second}
	if configure != nil {
		configure(&cfg)
	}
	svc, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apiserver.New(svc, testToken, log))
	t.Cleanup(func() {
		srv.Close()
		fp.Close()
		st.Close()
	})
	if _, err := svc.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: testAgent, Name: testAgent}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Connect(ctx, conn); err != nil {
		t.Fatal(err)
	}
	return srv, fp, st
}

// TestStartFailedCreateIsToolError: computer_start whose create failed, or
// that waited on another start whose create failed, is an error result
// with the supervisor's code, never a stopped session.
func TestStartFailedCreateIsToolError(t *testing.T) {
	srv, fp, st := realSupervisor(t)
	ctx := testContext(t)
	c, err := api.New(srv.URL, testToken, api.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cs := connectInMemory(t, New(c, testAgent, WithLogger(testLogger(t))))

	// The create of this computer_start fails: 503, retried with its key.
	fp.SetFaults(fake.Faults{FailCreates: 1, CreateErr: providers.ErrCapacity})
	res := callTool(t, cs, ToolStart, nil)
	want := "computer_start failed: the provider is out of quota or capacity (code provider_unavailable, HTTP 503)"
	if !res.IsError || text(res) != want {
		t.Errorf("start = %v %q, want an error %q", res.IsError, text(res), want)
	}

	// This computer_start waits on a REST start whose create fails.
	fp.SetFaults(fake.Faults{FailCreates: 1, CreateErr: providers.ErrBadImage, CreateDelay: 3 * time.Second})
	first := make(chan error, 1)
	go func() {
		_, err := c.Start(ctx, testAgent)
		first <- err
	}()
	for {
		if x, err := st.LiveSession(ctx, testAgent); err == nil && x.State == store.StateStarting {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the first start never began its create")
		case <-time.After(2 * time.Millisecond):
		}
	}
	res = callTool(t, cs, ToolStart, nil)
	if !res.IsError || !strings.Contains(text(res), "(code provider_error, HTTP 502)") || !strings.Contains(text(res), "computer image missing") {
		t.Errorf("start that waited = %v %q, want the failed create's error", res.IsError, text(res))
	}
	if err := <-first; err == nil || !strings.Contains(err.Error(), "provider_error") {
		t.Errorf("the first start: %v", err)
	}
	if n, _ := fp.Counts(); n != 2 {
		t.Errorf("creates = %d, want 2", n)
	}

	// Once the provider works, computer_start starts the computer.
	fp.SetFaults(fake.Faults{})
	res = callTool(t, cs, ToolStart, nil)
	var s api.Session
	structured(t, res, &s)
	if res.IsError || s.State != api.StateRunning {
		t.Fatalf("start after the failures = %v %q", res.IsError, text(res))
	}
}
