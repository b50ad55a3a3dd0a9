package e2e

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/tunnel"
	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/supervisor/daemon"
)

// TestTunnelProvider runs `berth agent tunnel`'s runner (without cloudflared,
// serving on loopback) and connects an agent to it through the tunnel
// provider: the supervisor runs the five tools on that computer.
func TestTunnelProvider(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, stopRunner := runTunnel(t, ctx, tunnel.Options{
		Lifetime: 2 * time.Minute,
		Docker:   docker.Options{HeadlessImage: "berth/test:latest", MemoryMB: 256},
	})
	defer stopRunner()

	s := startSupervisorEgress(t, "berth/test:latest", daemon.EgressOptions{Listen: ":0"}, "docker", "tunnel")
	s.must("POST", "/v1/agents", map[string]any{"id": "byo", "name": "byo"}, 201, nil)
	if st := s.call("POST", "/v1/computers", map[string]any{"agent": "byo", "provider": "tunnel", "credentials": map[string]string{"url": info.URL}}, nil); st != 400 {
		t.Fatalf("tunnel connection without apiKey: %d, want 400", st)
	}
	s.must("POST", "/v1/computers", map[string]any{"agent": "byo", "provider": "tunnel",
		"credentials": map[string]string{"url": info.URL, "apiKey": info.Token}}, 201, nil)
	var sess session
	s.must("POST", "/v1/agents/byo/computer/start", nil, 200, &sess)
	if sess.Provider != "tunnel" || sess.State != "running" {
		t.Fatalf("start: %+v", sess)
	}
	x := s.exec("byo", "echo from the tunnel; id -u")
	if x.Stdout != "from the tunnel\n1000\n" {
		t.Fatalf("exec: %+v", x)
	}
	s.must("POST", "/v1/agents/byo/computer/write_file", map[string]any{"path": "t.txt", "content": "tunnelled"}, 200, nil)
	var r struct {
		Content string `json:"content"`
	}
	s.must("POST", "/v1/agents/byo/computer/read_file", map[string]any{"path": "t.txt"}, 200, &r)
	if r.Content != "tunnelled" {
		t.Fatalf("read: %+v", r)
	}
	// A terminal and a port preview through the tunnel.
	cl, err := api.New(s.url, s.token)
	if err != nil {
		t.Fatal(err)
	}
	var termOut syncbuf.Buffer
	tc, err := cl.Terminal(ctx, "byo", api.TerminalRequest{Command: "read x; echo term-$x; exit 4"}, &termOut)
	if err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte("tunnelled\n"))
	if exit, err := tc.Wait(); err != nil || exit.ExitCode != 4 || !strings.Contains(termOut.String(), "term-tunnelled") {
		t.Fatalf("terminal through the tunnel: %+v %v %q", exit, err, termOut.String())
	}
	tc.Close()
	if x := s.exec("byo", "mkdir -p site && echo 'served through the tunnel' > site/index.html && httpd -p 127.0.0.1:8091 -h site"); x.ExitCode != 0 {
		t.Fatalf("serve a page: %+v", x)
	}
	var pv api.Preview
	s.must("POST", "/v1/agents/byo/computer/ports/8091/preview", nil, 201, &pv)
	var code int
	var page string
	if !testkit.Poll(30*time.Second, func() bool { code, page = fetch(t, pv.URL); return code == 200 }) || page != "served through the tunnel\n" {
		t.Fatalf("preview through the tunnel: %d %q", code, page)
	}
	s.must("POST", "/v1/agents/byo/computer/stop", nil, 200, nil)
	// The apiKey is kept only sealed in the connection, never with the session.
	all, err := s.d.Store.SessionsByState(ctx, "stopped")
	if err != nil || len(all) != 1 {
		t.Fatalf("sessions: %v %v", all, err)
	}
	if strings.Contains(all[0].Header+all[0].Endpoint+all[0].MachineID, info.Token) {
		t.Fatal("the connection token is stored with the session")
	}
	c, err := s.d.Store.GetConnection(ctx, "byo")
	if err != nil || strings.Contains(string(c.Credentials), info.Token) {
		t.Fatalf("credentials not sealed: %v", err)
	}
}

// runTunnel runs `berth agent tunnel`'s runner with opts (without
// cloudflared, serving on loopback, its connection file in the test's
// folder) until it is ready, and returns its info and a stop that ends it
// and checks it ended cleanly; stop may be called more than once, and is
// called when the test ends.
func runTunnel(t *testing.T, ctx context.Context, opts tunnel.Options) (tunnel.Info, func()) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	ready := make(chan tunnel.Info, 1)
	done := make(chan error, 1)
	opts.ConnectionFile = filepath.Join(t.TempDir(), "connection.json")
	opts.LookPath = func(string) (string, error) { return "", exec.ErrNotFound }
	opts.Ready = func(i tunnel.Info) { ready <- i }
	go func() { done <- tunnel.Run(rctx, opts) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("runner: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case info := <-ready:
		return info, stop
	case err := <-done:
		done <- err
		t.Fatalf("runner ended: %v", err)
	case <-ctx.Done():
		t.Fatal("runner not ready")
	}
	return tunnel.Info{}, stop
}
