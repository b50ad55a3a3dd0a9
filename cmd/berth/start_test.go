package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers"
	sup "github.com/berthdev/berth/supervisor"
)

func TestStartFailed(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusBadGateway, `{"error":{"code":"provider_error","message":"fake create: computer image missing"}}`)
	run(t, "", "computer", "start", "--agent", "a1").
		want(t, exitFailure, "", "berth: fake create: computer image missing (provider_error)\n")
}

// TestStartEndedSession: a start answered with a session that holds no
// computer started nothing, whatever the status.
func TestStartEndedSession(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, `{"id":"s1","state":"stopped","provider":"docker"}`)
	run(t, "", "computer", "start", "--agent", "a1").
		want(t, exitFailure, "", "berth: the supervisor answered session s1 stopped: no computer was started; run berth computer start again\n")
}

// badImage is a provider whose creates fail for sure, once release is
// closed; creating is closed when the first one begins. It is not
// registered, so that berth providers does not list it.
type badImage struct {
	creating chan struct{}
	release  chan struct{}
	creates  chan struct{} // one value per create
}

func (p *badImage) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	p.creates <- struct{}{}
	select {
	case <-p.creating:
	default:
		close(p.creating)
	}
	select {
	case <-p.release:
	case <-ctx.Done():
		return providers.Machine{}, ctx.Err()
	}
	return providers.Machine{}, fmt.Errorf("create %s: image berth-headless: %w", spec.ComputerID, providers.ErrBadImage)
}

func (p *badImage) Destroy(context.Context, string) error { return nil }

// TestStartWaitingOnFailedCreate: berth computer start that waited on
// another start whose create failed exits with that failure.
func TestStartWaitingOnFailedCreate(t *testing.T) {
	ctx := testContext(t)
	p := &badImage{creating: make(chan struct{}), release: make(chan struct{}), creates: make(chan struct{}, 10)}
	srv := supervisortest.Start(t, supervisortest.Options{
		Token: testToken, Providers: map[string]providers.Provider{"bad": p}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	srv.Agent(t, "a1", "", &sup.ConnectRequest{})
	t.Setenv("BERTH_URL", srv.URL)
	t.Setenv("SUPERVISOR_TOKEN", testToken)

	c, err := api.New(srv.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := c.Start(ctx, "a1")
		first <- err
	}()
	select {
	case <-p.creating:
	case <-ctx.Done():
		t.Fatal("the first start never began its create")
	}
	go func() {
		time.Sleep(time.Second) // the second start finds the first creating
		close(p.release)
	}()
	r := run(t, "", "computer", "start", "--agent", "a1")
	if r.code != exitFailure || r.stdout != "" || !strings.HasSuffix(r.stderr, "computer image missing (provider_error)\n") {
		t.Errorf("start that waited: %+v, want exit %d and the failed create's error", r, exitFailure)
	}
	if err := <-first; err == nil || !strings.Contains(err.Error(), "provider_error") {
		t.Errorf("the first start: %v", err)
	}
	if n := len(p.creates); n != 1 {
		t.Errorf("creates = %d, want 1", n)
	}
}
