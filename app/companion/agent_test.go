package companion

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/internal/testkit"
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
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
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

	testkit.EventuallyContext(t, ctx, "the not-paired problem", func() bool { return strings.Contains(r.Problem(), "not paired yet") })
	if _, err := c.Status(ctx); err == nil {
		t.Fatal("an agent answers before pairing")
	}

	// Pairing stores the credentials and restarts the agent.
	if _, err := store.Save(credstore.Credentials{LenderID: "cp_own", Token: "tok-own", SupervisorURL: "http://supervisor.test",
		RelayURL: "ws://127.0.0.1:1/v1/agents/connect"}); err != nil {
		t.Fatal(err)
	}
	r.Restart()
	answers := func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Supervisor.LenderID == "cp_own" && st.Supervisor.URL == "http://supervisor.test"
	}
	testkit.EventuallyContext(t, ctx, "the agent's status on its socket", answers)
	if p := r.Problem(); p != "" {
		t.Errorf("problem while running: %q", p)
	}

	r.Pause()
	if _, err := c.Status(ctx); err == nil {
		t.Fatal("the agent still answers while paused for a service")
	}
	r.Resume()
	testkit.EventuallyContext(t, ctx, "the agent back after Resume", answers)
}

func dockerImage() error {
	return exec.Command("docker", "image", "inspect", testImage).Run()
}

// TestServiceNeedsBerth: without the berth command the service settings
// say what to install, and nothing is changed.
func TestServiceNeedsBerth(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	s := newServiceCtl(t.TempDir(), nil)
	if s.berth != "" {
		t.Skipf("a berth binary sits beside the test binary: %s", s.berth)
	}
	for name, call := range map[string]func() error{
		"Installed": func() error { _, err := s.Installed(t.Context()); return err },
		"Install":   func() error { return s.Install(t.Context()) },
		"Remove":    func() error { return s.Remove(t.Context()) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "the berth command is neither beside this app nor on PATH") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestServiceConfig: the service runs berth agent run on the app's data
// folder, as the user (a user service) unless root.
func TestServiceConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "berth"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	s := newServiceCtl("/data/agent", nil)
	if s.berth != filepath.Join(bin, "berth") || s.cfg.Executable != s.berth {
		t.Errorf("berth = %q, executable %q", s.berth, s.cfg.Executable)
	}
	if got := strings.Join(s.cfg.Args, " "); got != "agent run --data /data/agent" {
		t.Errorf("args = %q", got)
	}
	if s.cfg.User != (os.Geteuid() != 0) {
		t.Errorf("user service = %v as uid %d", s.cfg.User, os.Geteuid())
	}
}
