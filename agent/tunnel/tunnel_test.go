package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	ptunnel "github.com/berthdev/berth/providers/tunnel"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// testImage has computerd; `make images` builds it.
const testImage = "berth/test:latest"

// standinURL is what the stand-in cloudflared prints.
const standinURL = "https://standin-quick-tunnel-42.trycloudflare.com"

// testContext returns a context that ends before the test's deadline, and at
// most limit from now.
func testContext(t *testing.T, limit time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-10*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

type testLogWriter struct{ tb testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// engine returns a client for the test engine. It skips the test when the
// engine or the test image is missing, and fails instead when
// BERTH_REQUIRE_DOCKER=1.
func engine(t *testing.T, ctx context.Context) *client.Client {
	t.Helper()
	testkit.RequireDocker(t, testImage)
	host := os.Getenv(docker.SettingSocket)
	if host == "" {
		host = docker.DefaultSocket
	}
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// standin writes a stand-in cloudflared into a temporary folder, puts that
// folder first on PATH, and returns the file its arguments are written to.
// It prints a quick-tunnel banner the way cloudflared does, on stderr, and
// then waits to be killed.
func standin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	script := fmt.Sprintf(`#!/bin/sh
echo "$@" > %q
cat >&2 <<'EOT'
2025-01-01T00:00:00Z INF Thank you for trying Cloudflare Tunnel.
2025-01-01T00:00:00Z INF Requesting new quick Tunnel on trycloudflare.com...
2025-01-01T00:00:01Z INF +--------------------------------------------------------------------------------------------+
2025-01-01T00:00:01Z INF |  Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):  |
2025-01-01T00:00:01Z INF |  %s                                              |
2025-01-01T00:00:01Z INF +--------------------------------------------------------------------------------------------+
EOT
exec sleep 3600
`, args, standinURL)
	if err := os.WriteFile(filepath.Join(dir, Cloudflared), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return args
}

// toLocal sends requests for the stand-in's public URL to the runner's
// loopback port, as the real tunnel would.
type toLocal struct {
	public, local *url.URL
	base          *http.Transport
}

func (tl *toLocal) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == tl.public.Host {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = tl.local.Scheme, tl.local.Host
		r.Host = ""
	}
	return tl.base.RoundTrip(r)
}

type run struct {
	info chan Info
	done chan error
}

// start runs the runner in the background; the test cancels ctx or waits for
// the lifetime to end.
func start(t *testing.T, ctx context.Context, opts Options) *run {
	t.Helper()
	r := &run{info: make(chan Info, 1), done: make(chan error, 1)}
	opts.Docker.HeadlessImage = testImage
	opts.Docker.Host = os.Getenv(docker.SettingSocket)
	opts.Docker.MemoryMB = 256
	opts.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, nil))
	opts.Out = testLogWriter{t}
	opts.Ready = func(i Info) { r.info <- i }
	go func() { r.done <- Run(ctx, opts) }()
	return r
}

func (r *run) ready(t *testing.T, ctx context.Context) Info {
	t.Helper()
	select {
	case i := <-r.info:
		return i
	case err := <-r.done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("runner not ready in time")
	}
	return Info{}
}

func (r *run) wait(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("runner did not end in time")
	}
}

func checkFile(t *testing.T, path string, want Connection) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("connection file mode = %v, want 0600", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Connection
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("connection file %q: %v", b, err)
	}
	if got != want {
		t.Errorf("connection file = %+v, want %+v", got, want)
	}
}

func requireGone(t *testing.T, ctx context.Context, cli *client.Client, path, machineID string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("connection file still there (stat: %v)", err)
	}
	if _, err := cli.ContainerInspect(ctx, machineID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("container %s still there (inspect: %v)", machineID, err)
	}
}

// TestQuickTunnel runs the runner with the stand-in cloudflared: the printed
// URL lands in the connection file, the container is hardened, the tunnel
// provider reaches the computer through it, and cancelling the context
// removes the file and the computer.
func TestQuickTunnel(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cli := engine(t, ctx)
	args := standin(t)
	path := filepath.Join(t.TempDir(), "connection.json")

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := start(t, rctx, Options{Lifetime: time.Hour, ConnectionFile: path})
	info := r.ready(t, ctx)

	if info.URL != standinURL || info.Tunnel != "quick" {
		t.Errorf("URL = %q (%s), want %q (quick)", info.URL, info.Tunnel, standinURL)
	}
	checkFile(t, path, Connection{URL: standinURL, Token: info.Token})
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), "tunnel --no-autoupdate --url "+info.LocalURL; got != want {
		t.Errorf("cloudflared arguments = %q, want %q", got, want)
	}

	t.Run("hardened", func(t *testing.T) {
		res, err := cli.ContainerInspect(ctx, info.MachineID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := res.Container
		if c.Config.User != docker.User {
			t.Errorf("user = %q, want %q", c.Config.User, docker.User)
		}
		if !c.HostConfig.ReadonlyRootfs {
			t.Error("root filesystem is writable")
		}
		if c.HostConfig.Privileged {
			t.Error("privileged")
		}
		if len(c.HostConfig.Binds) != 0 {
			t.Errorf("binds = %v, want none", c.HostConfig.Binds)
		}
		if len(c.Mounts) != 1 || c.Mounts[0].Type != mount.TypeVolume || c.Mounts[0].Destination != "/home/berth" {
			t.Errorf("mounts = %+v, want only the home volume at /home/berth", c.Mounts)
		}
		for _, m := range c.Mounts {
			if strings.Contains(m.Source, "docker.sock") || strings.Contains(m.Destination, "docker.sock") {
				t.Errorf("Docker socket mounted: %+v", m)
			}
		}
		if c.HostConfig.Memory != 256<<20 || c.HostConfig.NanoCPUs == 0 || c.HostConfig.PidsLimit == nil || *c.HostConfig.PidsLimit == 0 {
			t.Errorf("limits: memory %d, nanoCPUs %d, pids %v; want all set", c.HostConfig.Memory, c.HostConfig.NanoCPUs, c.HostConfig.PidsLimit)
		}
		for _, e := range c.Config.Env {
			if strings.Contains(e, info.Token) {
				t.Errorf("the token is in the computer's environment: %q", e)
			}
		}
	})

	t.Run("provider", func(t *testing.T) {
		pub, _ := url.Parse(standinURL)
		local, _ := url.Parse(info.LocalURL)
		base := &http.Transport{}
		defer base.CloseIdleConnections()
		p := ptunnel.New(ptunnel.Options{Transport: &toLocal{public: pub, local: local, base: base}})
		checkProvider(t, ctx, p, standinURL, info.Token)
	})

	cancel()
	r.wait(t, ctx)
	requireGone(t, ctx, cli, path, info.MachineID)
}

// checkProvider connects the tunnel provider to the runner at u.
func checkProvider(t *testing.T, ctx context.Context, p *ptunnel.Tunnel, u, tok string) {
	t.Helper()
	spec := providers.Spec{ComputerID: "c-1", SessionID: "s-1", AttemptID: "a-1", Credentials: map[string]string{"url": u, "apiKey": tok}}
	if err := p.CheckCredentials(spec.Credentials); err != nil {
		t.Fatalf("CheckCredentials: %v", err)
	}
	m, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if m.Endpoint != u || m.ID == "" {
		t.Errorf("machine = %+v, want endpoint %s and the runner's machine id", m, u)
	}

	bad := spec
	bad.Credentials = map[string]string{"url": u, "apiKey": "wrong-" + tok}
	if _, err := p.Create(ctx, bad); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("Create with a wrong apiKey: %v, want ErrBadCredentials", err)
	}

	// As the supervisor does: its own derived token, and the provider's
	// transport with the connection's credentials.
	c := computerd.NewClient(m.Endpoint, "the-supervisors-derived-token",
		computerd.WithTransport(p.Transport(m, spec.Credentials)))
	res, err := c.Exec(ctx, computerd.ExecRequest{Command: "echo hi", TimeoutMs: 10000})
	if err != nil {
		t.Fatalf("exec through the tunnel: %v", err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hi" {
		t.Errorf("exec = %+v, want exit 0 and hi", res)
	}
	if err := p.Destroy(providers.WithCredentials(ctx, spec.Credentials), m.ID); err != nil {
		t.Errorf("Destroy: %v", err)
	}
}

// TestLifetimeEnds runs without cloudflared: the runner serves on its
// loopback port, and when the lifetime ends the file and computer are gone.
func TestLifetimeEnds(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cli := engine(t, ctx)
	path := filepath.Join(t.TempDir(), "connection.json")
	noCloudflared := func(string) (string, error) { return "", exec.ErrNotFound }

	clk := clock.NewFake(time.Now())
	const lifetime = 8 * time.Second
	r := start(t, ctx, Options{Lifetime: lifetime, ConnectionFile: path, LookPath: noCloudflared, Clock: clk})
	info := r.ready(t, ctx)
	if info.Tunnel != "none" || info.URL != info.LocalURL || !strings.HasPrefix(info.URL, "http://127.0.0.1:") {
		t.Errorf("URL = %q (%s), want the loopback URL %q (none)", info.URL, info.Tunnel, info.LocalURL)
	}
	checkFile(t, path, Connection{URL: info.URL, Token: info.Token})

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	checkProvider(t, ctx, ptunnel.New(ptunnel.Options{Transport: base}), info.URL, info.Token)

	endLifetime(t, ctx, clk, lifetime)
	r.wait(t, ctx)
	requireGone(t, ctx, cli, path, info.MachineID)
}

// endLifetime moves clk past a run's lifetime once the run is timing it.
func endLifetime(t *testing.T, ctx context.Context, clk *clock.Fake, lifetime time.Duration) {
	t.Helper()
	testkit.EventuallyContext(t, ctx, "the run to time its lifetime", func() bool { return clk.Waiters() == 1 })
	clk.Advance(lifetime)
}

// TestNamedURL uses --url's URL and starts no quick tunnel.
func TestNamedURL(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cli := engine(t, ctx)
	args := standin(t)
	path := filepath.Join(t.TempDir(), "connection.json")
	const named = "https://computer.example.com"

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := start(t, rctx, Options{Lifetime: time.Hour, ConnectionFile: path, URL: named})
	info := r.ready(t, ctx)
	if info.URL != named || info.Tunnel != "named" {
		t.Errorf("URL = %q (%s), want %q (named)", info.URL, info.Tunnel, named)
	}
	checkFile(t, path, Connection{URL: named, Token: info.Token})
	if _, err := os.Stat(args); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cloudflared ran with a named tunnel's URL (stat %s: %v)", args, err)
	}
	cancel()
	r.wait(t, ctx)
	requireGone(t, ctx, cli, path, info.MachineID)
}

// TestExistingFile refuses to overwrite a connection file, before any
// computer is made.
func TestExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "connection.json")
	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(t.Context(), Options{Lifetime: time.Minute, ConnectionFile: path,
		Docker: docker.Options{Host: "unix:///nonexistent/docker.sock"}})
	if !errors.Is(err, ErrFileExists) {
		t.Fatalf("Run = %v, want ErrFileExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Errorf("file = %q, want it untouched", b)
	}
}

// TestEngineMissing removes the claimed connection file when the computer
// cannot be made.
func TestEngineMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "connection.json")
	err := Run(t.Context(), Options{Lifetime: time.Minute, ConnectionFile: path,
		Docker: docker.Options{Host: "unix:///nonexistent/docker.sock"}})
	if err == nil {
		t.Fatal("Run with no engine succeeded")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("connection file left behind (stat: %v)", err)
	}
}

func TestQuickURL(t *testing.T) {
	lines := []string{
		"2025-01-01T00:00:01Z INF |  https://seas-bold-fine-x9.trycloudflare.com                                 |",
		"INF Requesting new quick Tunnel on trycloudflare.com...",
	}
	var got []string
	for _, l := range lines {
		if u := quickURL.FindString(l); u != "" {
			got = append(got, u)
		}
	}
	if want := []string{"https://seas-bold-fine-x9.trycloudflare.com"}; !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}

// TestGuardFailsClosed: when the host firewall cannot close this host to
// the computer, no computer starts and nothing is left behind; with
// --unguarded it starts.
func TestGuardFailsClosed(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cli := engine(t, ctx)
	path := filepath.Join(t.TempDir(), "connection.json")
	noCloudflared := func(string) (string, error) { return "", exec.ErrNotFound }
	failing := func(context.Context, int) error { return errors.New("iptables: permission denied") }
	before, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", providers.LabelDeployment+"=tunnel")})
	if err != nil {
		t.Fatal(err)
	}
	err = Run(ctx, Options{Lifetime: 8 * time.Second, ConnectionFile: path, LookPath: noCloudflared, GuardHost: failing})
	if err == nil || !strings.Contains(err.Error(), "--unguarded") {
		t.Fatalf("Run with a failing guard: %v, want a refusal naming --unguarded", err)
	}
	after, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", providers.LabelDeployment+"=tunnel")})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) > len(before.Items) {
		t.Errorf("a computer was made with the guard failing: %d containers before, %d after", len(before.Items), len(after.Items))
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("connection file written (stat: %v)", err)
	}

	clk := clock.NewFake(time.Now())
	const lifetime = 8 * time.Second
	r := start(t, ctx, Options{Lifetime: lifetime, ConnectionFile: path, LookPath: noCloudflared, GuardHost: failing, Unguarded: true, Clock: clk})
	info := r.ready(t, ctx)
	endLifetime(t, ctx, clk, lifetime)
	r.wait(t, ctx)
	requireGone(t, ctx, cli, path, info.MachineID)
}
