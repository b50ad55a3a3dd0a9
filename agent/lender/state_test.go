package lender

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
)

// faultyEngine is the real Docker engine behind a unix socket of its own
// that refuses container removals while failRemove is set, the way an
// engine answers a container it cannot remove.
type faultyEngine struct {
	host       string // unix://PATH, for docker.Options.Host
	failRemove atomic.Bool
	failStats  atomic.Bool // answers stats 503, as an engine that is going away
	refused    atomic.Int64
}

var (
	containerDelete = regexp.MustCompile(`^(/v[0-9.]+)?/containers/[^/]+$`)
	containerStats  = regexp.MustCompile(`^(/v[0-9.]+)?/containers/[^/]+/stats$`)
)

func newFaultyEngine(t *testing.T) *faultyEngine {
	t.Helper()
	sock, ok := strings.CutPrefix(docker.DefaultSocket, "unix://")
	if !ok {
		t.Fatalf("docker.DefaultSocket %q is not a unix socket", docker.DefaultSocket)
	}
	path := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &faultyEngine{host: "unix://" + path}
	var dialer net.Dialer
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "docker"})
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", sock)
		}},
		FlushInterval: -1,
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete && containerDelete.MatchString(r.URL.Path) && f.failRemove.Load() {
				f.refused.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte(`{"message":"could not kill running container: device or resource busy"}` + "\n"))
				return
			}
			if containerStats.MatchString(r.URL.Path) && f.failStats.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"message":"the engine is shutting down"}` + "\n"))
				return
			}
			proxy.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		proxy.Transport.(*http.Transport).CloseIdleConnections()
	})
	return f
}

// TestCleanupFailedOverControlSocket runs a computer on the real engine
// behind a socket that injects faults. While the engine does not answer
// about the computer, its session is uncertain. Then the engine keeps
// refusing its removal. The owner's stops fail, and the
// session shows stopping, then cleanup_failed after
// control.CleanupFailedAfter attempts, with the engine's reason and the
// count, over the real control socket; the agent's own retry after the
// lease counts too. Once the engine removes containers again, a stop ends
// the session and the container is gone.
func TestCleanupFailedOverControlSocket(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 2*time.Minute)
	eng := newFaultyEngine(t)
	r := newRig(t, "cp_cleanupfail", "", nil)
	log := testLogger(t)
	r.l.cfg.Docker = func(cpus float64, memoryMB int64) (Docker, error) {
		return docker.New(docker.Options{Host: eng.host, HeadlessImage: testImage, DesktopImage: testImage,
			CPUs: cpus, MemoryMB: memoryMB, Logger: log})
	}
	r.set(nil)

	sock := filepath.Join(t.TempDir(), control.SocketName)
	ln, err := control.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- control.Serve(sctx, ln, r.l, log) }()
	defer func() {
		stop()
		<-served
	}()
	cli := control.NewClient(sock)
	defer cli.Close()

	req, _ := request("agent-stuck")
	destroyAll(t, req.ComputerID)
	if _, err := r.l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	session := func() control.Session {
		t.Helper()
		ss, err := cli.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if s.ID == req.ComputerID {
				return s
			}
		}
		t.Fatalf("session %s not listed: %+v", req.ComputerID, ss)
		return control.Session{}
	}
	if s := session(); s.State != control.SessionRunning || s.FailedAttempts != 0 || s.StateReason != "" ||
		s.Machine != docker.ContainerPrefix+req.ComputerID {
		t.Fatalf("fresh session: %+v", s)
	}

	// While the engine does not answer about the computer, its session is
	// uncertain.
	eng.failStats.Store(true)
	if s := session(); s.State != control.SessionUncertain || !strings.Contains(s.StateReason, "cannot tell") {
		t.Fatalf("session while the engine does not answer: %+v", s)
	}
	eng.failStats.Store(false)

	eng.failRemove.Store(true)
	for i := 1; i <= control.CleanupFailedAfter; i++ {
		_, err := cli.StopSession(ctx, req.ComputerID)
		var ae *control.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "device or resource busy") {
			t.Fatalf("stop %d: %v, want 503 with the engine's reason", i, err)
		}
		s := session()
		want := control.SessionStopping
		if i == control.CleanupFailedAfter {
			want = control.SessionCleanupFailed
		}
		if s.State != want || s.FailedAttempts != i || !strings.Contains(s.StateReason, "device or resource busy") || s.NextAttempt.IsZero() {
			t.Fatalf("after %d failed stops: %+v, want state %s", i, s, want)
		}
	}
	if n := eng.refused.Load(); n < int64(control.CleanupFailedAfter) {
		t.Fatalf("the engine refused %d removals, want at least %d", n, control.CleanupFailedAfter)
	}
	if out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", docker.ContainerPrefix+req.ComputerID).Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Fatalf("container after refused removals: %q %v, want it still running", out, err)
	}

	// The agent tries again by itself once the lease and its grace are over.
	r.clk.Set(session().NextAttempt)
	testkit.EventuallyContext(t, ctx, "the agent to try again by itself", func() bool { return session().FailedAttempts > control.CleanupFailedAfter })
	if s := session(); s.State != control.SessionCleanupFailed {
		t.Fatalf("after the agent's own retry: %+v", s)
	}

	eng.failRemove.Store(false)
	if _, err := cli.StopSession(ctx, req.ComputerID); err != nil {
		t.Fatalf("stop once the engine removes again: %v", err)
	}
	if ss, err := cli.Sessions(ctx); err != nil || len(ss) != 0 {
		t.Fatalf("sessions after the stop: %+v %v", ss, err)
	}
	if err := exec.Command("docker", "inspect", docker.ContainerPrefix+req.ComputerID).Run(); err == nil {
		t.Fatal("the container is still on the engine after the stop")
	}
}
