package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// testImage is built from testdata/image once per test run.
const testImage = "berth/provider-test:latest"

// busybox is the host's static busybox, copied into the test image.
const busybox = "/bin/busybox"

// enableEngine is what to run when the engine is not reachable.
const enableEngine = "apt-get install -y docker.io && (setsid dockerd >/tmp/dockerd.log 2>&1 &) && docker info"

// testContext returns a context that ends before the test's deadline, and at
// most limit from now.
func testContext(t *testing.T, limit time.Duration) context.Context {
	return testkit.ContextTimeout(t, limit)
}

// cleanupContext is for t.Cleanup functions, which run after t.Context ends.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

type testLogWriter struct{ tb testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newTestDocker returns a provider for the test engine (DOCKER_SOCKET, or the
// default socket) running the test image unless opts names others. It skips
// the test when the engine cannot be reached, unless CI is set.
func newTestDocker(tb testing.TB, ctx context.Context, opts Options) *Docker {
	tb.Helper()
	if opts.Host == "" {
		opts.Host = os.Getenv(SettingSocket)
	}
	if opts.HeadlessImage == "" {
		opts.HeadlessImage = testImage
	}
	if opts.DesktopImage == "" {
		opts.DesktopImage = testImage
	}
	opts.Logger = slog.New(slog.NewTextHandler(testLogWriter{tb}, nil))
	d, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })

	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := d.cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		if client.IsErrConnectionFailed(err) {
			testkit.Missing(tb, testkit.DockerEnv, fmt.Sprintf("no Docker engine at %s (%v)", d.opts.Host, err), enableEngine)
		}
		tb.Fatalf("Docker engine at %s: %v (to start one: %s)", d.opts.Host, err, enableEngine)
	}
	if err := buildTestImage(ctx, d); err != nil {
		tb.Fatal(err)
	}
	return d
}

var (
	buildOnce sync.Once
	buildErr  error
)

// buildTestImage builds testImage once per run: busybox, a berth user and
// its home. The builder's cache makes later runs take well under a second.
func buildTestImage(ctx context.Context, d *Docker) error {
	buildOnce.Do(func() { buildErr = build1(ctx, d) })
	return buildErr
}

func build1(ctx context.Context, d *Docker) error {
	start := time.Now()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name, src string, mode int64) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	if err := add("busybox", busybox, 0o755); err != nil {
		return fmt.Errorf("test image needs a static busybox at %s (apt-get install -y busybox-static): %w", busybox, err)
	}
	for _, f := range []string{"Dockerfile", "passwd", "group"} {
		if err := add(f, filepath.Join("testdata", "image", f), 0o644); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	res, err := d.cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:        []string{testImage},
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", testImage, err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	var log strings.Builder
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("build %s: %w", testImage, err)
		}
		log.WriteString(msg.Stream)
		if msg.Error != "" {
			return fmt.Errorf("build %s: %s\n%s", testImage, msg.Error, log.String())
		}
	}
	if _, err := d.cli.ImageInspect(ctx, testImage); err != nil {
		return fmt.Errorf("build %s: %w\n%s", testImage, err, log.String())
	}
	d.log.Info("test image built", "image", testImage, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func randomID(tb testing.TB) string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// testSpec returns a spec with a unique computer id.
func testSpec(tb testing.TB) providers.Spec {
	id := "test-" + randomID(tb)
	return providers.Spec{
		ComputerID:  id,
		SessionID:   "s-" + id,
		AttemptID:   "a-" + id,
		AgentID:     "agent-test",
		Image:       providers.ImageHeadless,
		TokenHash:   token.Hash("token-of-" + id),
		Env:         map[string]string{"HTTP_PROXY": "http://proxy.invalid:3128", "BERTH_TEST": "yes"},
		Lease:       time.Hour,
		Credentials: map[string]string{"apiKey": "never-in-the-computer-" + id},
	}
}

// create creates a computer and destroys it when the test ends.
func create(t *testing.T, ctx context.Context, d *Docker, spec providers.Spec) providers.Machine {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := d.Destroy(ctx, ContainerPrefix+spec.ComputerID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	m, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return m
}

// run runs a shell script in a container as its user and returns its output
// (stdout then stderr) and exit code.
func run(t *testing.T, ctx context.Context, d *Docker, ctr, script string) (string, int) {
	t.Helper()
	ex, err := d.cli.ExecCreate(ctx, ctr, client.ExecCreateOptions{
		Cmd:          []string{"/bin/sh", "-c", script},
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	att, err := d.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	ins, err := d.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return stdout.String() + stderr.String(), ins.ExitCode
}

// mustRun runs a script that must succeed and returns its trimmed output.
func mustRun(t *testing.T, ctx context.Context, d *Docker, ctr, script string) string {
	t.Helper()
	out, code := run(t, ctx, d, ctr, script)
	if code != 0 {
		t.Fatalf("exec %q: exit %d: %s", script, code, out)
	}
	return strings.TrimSpace(out)
}

// startDetached starts a long-running command in a container.
func startDetached(t *testing.T, ctx context.Context, d *Docker, ctr string, cmd ...string) {
	t.Helper()
	ex, err := d.cli.ExecCreate(ctx, ctr, client.ExecCreateOptions{Cmd: cmd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.cli.ExecStart(ctx, ex.ID, client.ExecStartOptions{Detach: true}); err != nil {
		t.Fatal(err)
	}
}

// requireGone fails unless the computer's container, networks and volume are
// all gone.
func requireGone(t *testing.T, ctx context.Context, d *Docker, computerID string) {
	t.Helper()
	n := namesOf(computerID)
	if _, err := d.cli.ContainerInspect(ctx, n.container, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("container %s still there (inspect: %v)", n.container, err)
	}
	if _, err := d.cli.NetworkInspect(ctx, n.network, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("network %s still there (inspect: %v)", n.network, err)
	}
	for _, v := range []string{n.volume, DiskPrefix + computerID} {
		if _, err := d.cli.VolumeInspect(ctx, v, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("volume %s still there (inspect: %v)", v, err)
		}
	}
	f := labelFilter(computerID, "")
	nets, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	vols, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ctrs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(nets.Items)+len(vols.Items)+len(ctrs.Items) != 0 {
		t.Errorf("labelled leftovers of %s: %d containers, %d networks, %d volumes",
			computerID, len(ctrs.Items), len(nets.Items), len(vols.Items))
	}
}

// plainContainer starts an unmanaged container from the test image on the
// default network and removes it when the test ends.
func plainContainer(t *testing.T, ctx context.Context, d *Docker, start bool) string {
	t.Helper()
	name := "berth-provider-test-" + randomID(t)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		_, err := d.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Image: testImage}); err != nil {
		t.Fatal(err)
	}
	if start {
		if _, err := d.cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return name
}
