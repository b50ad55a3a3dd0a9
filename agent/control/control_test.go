package control_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

const testImage = "berth/test:latest"

// serve runs a lender's control API on a real unix socket.
func serve(t *testing.T) (*lender.Lender, *control.Client, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	led, err := ledger.OpenFile(ctx, filepath.Join(dir, ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lender.NewDockerEngine(docker.DefaultSocket)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	l, err := lender.New(lender.Config{
		LenderID: "cp_control", DataDir: dir, Ledger: led, Engine: eng, Logger: log, Version: "test",
		Pairing: control.Pairing{Paired: true, URL: "http://supervisor.test", LenderID: "cp_control"}, RelayURL: "ws://relay.test/v1/agents/connect",
		Docker: func(cpus float64, memoryMB int64) (lender.Docker, error) {
			return docker.New(docker.Options{HeadlessImage: testImage, DesktopImage: testImage, CPUs: cpus, MemoryMB: memoryMB, Logger: log})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", control.SocketName)
	ln, err := control.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(context.Background())
	go func() { done <- control.Serve(sctx, ln, l, log) }()
	c := control.NewClient(sock)
	t.Cleanup(func() {
		c.Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		l.Close()
		eng.Close()
		led.Close()
	})
	return l, c, sock
}

func apiErr(t *testing.T, err error, status int, code, msg string) {
	t.Helper()
	var ae *control.APIError
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code || !strings.Contains(ae.Message, msg) {
		t.Fatalf("error %v, want %d %s containing %q", err, status, code, msg)
	}
}

// TestControlAPI drives every endpoint over the socket, which only the
// owner may open.
func TestControlAPI(t *testing.T) {
	l, c, sock := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	if _, err := control.Listen(sock); err == nil || !strings.Contains(err.Error(), "another agent is serving it") {
		t.Fatalf("second listen on a served socket: %v", err)
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Lending || st.Relay.Online || st.Relay.URL != "ws://relay.test/v1/agents/connect" || !st.Supervisor.Paired ||
		st.Supervisor.LenderID != "cp_control" || st.DailySeconds != lender.DefaultSettings().DailySeconds {
		t.Fatalf("status %+v", st)
	}

	s, err := c.Settings(ctx)
	if d := lender.DefaultSettings(); err != nil || s.MaxComputers != d.MaxComputers || s.MemoryMB != d.MemoryMB || !s.Lending {
		t.Fatalf("settings %+v %v", s, err)
	}
	bad := s
	bad.MemoryMB = 1
	_, err = c.SetSettings(ctx, bad)
	apiErr(t, err, http.StatusBadRequest, control.CodeBadRequest, "memoryMB: 1 is outside 256..65536")
	if got, _ := c.Settings(ctx); got.MemoryMB != s.MemoryMB {
		t.Fatalf("refused settings were stored: %+v", got)
	}
	s.MemoryMB, s.Approval, s.ApprovalTimeoutSeconds, s.TimeZone = 256, true, 30, "Europe/Paris"
	if got, err := c.SetSettings(ctx, s); err != nil || got.MemoryMB != 256 || !got.Approval {
		t.Fatalf("set settings: %+v %v", got, err)
	}
	if got, err := c.SetLending(ctx, false); err != nil || got.Lending || got.MemoryMB != 256 {
		t.Fatalf("lending off: %+v %v", got, err)
	}
	if got, err := c.SetLending(ctx, true); err != nil || !got.Lending {
		t.Fatalf("lending on: %+v %v", got, err)
	}

	u, err := c.Usage(ctx, 0)
	if err != nil || len(u.Days) != 14 || u.Today.Day != u.Days[13].Day || u.TimeZone != "Europe/Paris" {
		t.Fatalf("usage %+v %v", u, err)
	}
	_, err = c.Usage(ctx, 200)
	apiErr(t, err, http.StatusBadRequest, control.CodeBadRequest, "days: 200 is outside 1..90")

	// Approval mode: a start waits; the owner sees it and denies it.
	req := lending.CreateRequest{ComputerID: "ctl1", SessionID: "s1", AttemptID: "a1", Deployment: "dep", Agent: "agent-7",
		Workspace: "lab", TokenHash: token.Hash("t"), LeaseSeconds: 600}
	errc := make(chan error, 1)
	go func() { _, err := l.Create(ctx, req); errc <- err }()
	var as []control.Approval
	testkit.EventuallyContext(t, ctx, "one approval asked", func() bool {
		as, err = c.Approvals(ctx)
		return err == nil && len(as) == 1
	})
	if len(as) != 1 || as[0].Agent != "agent-7" || as[0].Workspace != "lab" || as[0].Deadline.Sub(as[0].Requested) != 30*time.Second {
		t.Fatalf("approvals %+v", as)
	}
	if a, err := c.Deny(ctx, as[0].ID); err != nil || a.State != control.ApprovalDenied {
		t.Fatalf("deny %+v %v", a, err)
	}
	var le *lending.Error
	if err := <-errc; !errors.As(err, &le) || le.Code != lending.CodeDenied {
		t.Fatalf("denied start: %v", err)
	}
	_, err = c.Approve(ctx, as[0].ID)
	apiErr(t, err, http.StatusNotFound, control.CodeNotFound, "no session waits for approval")

	if ss, err := c.Sessions(ctx); err != nil || len(ss) != 0 {
		t.Fatalf("sessions %+v %v", ss, err)
	}
	_, err = c.StopSession(ctx, "nope")
	apiErr(t, err, http.StatusNotFound, control.CodeNotFound, `computer "nope" does not run on this machine`)
	_, err = c.Screenshot(ctx, "nope")
	apiErr(t, err, http.StatusNotFound, control.CodeNotFound, "does not run on this machine")
	if ps, err := c.Cleanups(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("cleanups %+v %v", ps, err)
	}
	_, err = c.RemoveLeftover(ctx, "lo_nope")
	apiErr(t, err, http.StatusNotFound, control.CodeNotFound, "no cleanup prompt")
}

// TestControlSessions runs a computer on the real engine and watches it
// through the socket: live memory from the Docker stats API, a screenshot
// answered 404 by a computer without a screen, and stop.
func TestControlSessions(t *testing.T) {
	testkit.RequireDocker(t, testImage)
	l, c, _ := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.UpdateSettings(ctx, control.SettingsUpdate{MemoryMB: ptr(int64(256)), Approval: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	id := "ctl" + time.Now().Format("150405.000000")
	id = strings.ReplaceAll(id, ".", "")
	tok := "token-" + id
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		d, _ := docker.New(docker.Options{})
		d.Destroy(cctx, docker.ContainerPrefix+id)
		d.Close()
	})
	req := lending.CreateRequest{ComputerID: id, SessionID: "s_" + id, AttemptID: "a_" + id, Deployment: "dep", Agent: "agent-8",
		Workspace: "lab", TokenHash: token.Hash(tok), LeaseSeconds: 600}
	errc := make(chan error, 1)
	go func() { _, err := l.Create(ctx, req); errc <- err }()
	var as []control.Approval
	testkit.EventuallyContext(t, ctx, "one approval asked", func() bool { as, _ = c.Approvals(ctx); return len(as) == 1 })
	if _, err := c.Approve(ctx, as[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("approved start: %v", err)
	}
	ss, err := c.Sessions(ctx)
	if err != nil || len(ss) != 1 {
		t.Fatalf("sessions %+v %v", ss, err)
	}
	s := ss[0]
	if s.ID != id || s.Agent != "agent-8" || s.Workspace != "lab" || s.Provider != "local" || s.TimeLeftSeconds <= 590 ||
		s.StatsError != "" || s.MemoryBytes == 0 || s.MemoryLimitBytes != 256<<20 {
		t.Fatalf("session %+v", s)
	}
	_, err = c.Screenshot(ctx, id)
	apiErr(t, err, http.StatusNotFound, control.CodeNoScreenshot, "after the supervisor's first call")
	// A call from the supervisor passes through; then the agent can ask.
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	cd := computerd.NewClient(srv.URL+lending.EndpointPath(id), tok)
	testkit.EventuallyContext(t, ctx, "computerd to answer through the agent", func() bool { _, err := cd.Processes(ctx); return err == nil })
	_, err = c.Screenshot(ctx, id)
	apiErr(t, err, http.StatusNotFound, control.CodeNoScreenshot, "has no screenshot endpoint")
	if st, err := c.Status(ctx); err != nil || st.Sessions != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	if got, err := c.StopSession(ctx, id); err != nil || got.ID != id {
		t.Fatalf("stop %+v %v", got, err)
	}
	if exec.Command("docker", "container", "inspect", docker.ContainerPrefix+id).Run() == nil {
		t.Fatal("container still there after stop")
	}
	if u, err := c.Usage(ctx, 1); err != nil || len(u.ByAgent) != 1 || u.ByAgent[0].Key != "agent-8" || u.ByWorkspace[0].Key != "lab" || u.Today.Sessions != 1 {
		t.Fatalf("usage %+v %v", u, err)
	}
}

func ptr[T any](v T) *T { return &v }
