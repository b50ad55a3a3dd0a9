package control_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers/docker"
)

const desktopImage = "berth/desktop:latest"

// TestControlScreenshot takes a desktop computer's screen through the
// control socket: the agent asks the computer's computerd, with the token
// it saw pass on the supervisor's first call.
func TestControlScreenshot(t *testing.T) {
	testkit.RequireDocker(t, desktopImage)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	led, err := ledger.OpenFile(ctx, filepath.Join(dir, ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	eng, err := lender.NewDockerEngine(docker.DefaultSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	l, err := lender.New(lender.Config{LenderID: "cp_screen", DataDir: dir, Ledger: led, Engine: eng, Logger: log,
		Docker: func(cpus float64, memoryMB int64) (lender.Docker, error) {
			return docker.New(docker.Options{DesktopImage: desktopImage, CPUs: cpus, MemoryMB: memoryMB, Logger: log})
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sock := filepath.Join(dir, control.SocketName)
	ln, err := control.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- control.Serve(sctx, ln, l, log) }()
	defer func() { stop(); <-done }()
	c := control.NewClient(sock)
	defer c.Close()

	id := strings.ReplaceAll("scr"+time.Now().Format("150405.000000"), ".", "")
	tok := "token-" + id
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		d, _ := docker.New(docker.Options{})
		d.Destroy(cctx, docker.ContainerPrefix+id)
		d.Close()
	})
	if _, err := l.Create(ctx, lending.CreateRequest{ComputerID: id, SessionID: "s_" + id, AttemptID: "a_" + id, Deployment: "dep",
		Agent: "agent-9", Workspace: "lab", Image: "desktop", TokenHash: token.Hash(tok), LeaseSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	cd := computerd.NewClient(srv.URL+lending.EndpointPath(id), tok)
	var png []byte
	testkit.EventuallyContext(t, ctx, "a screenshot", func() bool {
		if _, err := cd.Processes(ctx); err != nil {
			return false
		}
		png, err = c.Screenshot(ctx, id)
		return err == nil
	})
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 100 {
		t.Fatalf("screenshot is not a PNG: %d bytes %q", len(png), png[:min(len(png), 16)])
	}
}
