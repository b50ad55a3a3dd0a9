package companion

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/providers/docker"
)

// TestOwnAgent runs the app's own agent (lender.RunAgent on the real
// engine): it waits for a pairing, then serves the control socket with the
// pairing's identity, stops while a service would run it, and comes back.
func TestOwnAgent(t *testing.T) {
	need(t, "Docker image "+testImage, dockerImage())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	store, err := credstore.New(credstore.WithDir(filepath.Join(dir, "config")), credstore.FileOnly())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logWriter{t}, nil))
	r := newRunner(filepath.Join(dir, "agent"), docker.Options{HeadlessImage: testImage, DesktopImage: testImage}, store, "test", log)
	r.retry = 200 * time.Millisecond
	rctx, stop := context.WithCancel(ctx)
	r.Start(rctx)
	defer func() {
		stop()
		r.Wait()
	}()
	c := control.NewClient(r.socket)
	defer c.Close()

	eventually(t, ctx, "the not-paired problem", func() bool { return strings.Contains(r.Problem(), "not paired yet") })
	if _, err := c.Status(ctx); err == nil {
		t.Fatal("an agent answers before pairing")
	}

	// Pairing stores the credentials and restarts the agent.
	if _, err := store.Save(credstore.Credentials{AgentID: "cp_own", Token: "tok-own", SupervisorURL: "http://supervisor.test",
		RelayURL: "ws://127.0.0.1:1/v1/agents/connect"}); err != nil {
		t.Fatal(err)
	}
	r.Restart()
	answers := func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Supervisor.AgentID == "cp_own" && st.Supervisor.URL == "http://supervisor.test"
	}
	eventually(t, ctx, "the agent's status on its socket", answers)
	if p := r.Problem(); p != "" {
		t.Errorf("problem while running: %q", p)
	}

	r.Pause()
	if _, err := c.Status(ctx); err == nil {
		t.Fatal("the agent still answers while paused for a service")
	}
	r.Resume()
	eventually(t, ctx, "the agent back after Resume", answers)
}

func dockerImage() error {
	return exec.Command("docker", "image", "inspect", testImage).Run()
}

func eventually(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("never saw %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
