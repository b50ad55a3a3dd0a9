package providertest_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// dockerImage is the smallest computer image (images/build.sh builds it).
const dockerImage = "berth/test:latest"

// engine returns a client for the test engine. It skips the test when the
// engine or the image is missing, and fails instead when
// BERTH_REQUIRE_DOCKER=1 (as `make test` and CI set).
func engine(t *testing.T) (*client.Client, string) {
	t.Helper()
	testkit.RequireDocker(t, dockerImage)
	host := dockerHost()
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, host
}

// dockerHost is the engine the tests use: the docker provider's socket
// setting, or its default.
func dockerHost() string {
	if host := os.Getenv(docker.SettingSocket); host != "" {
		return host
	}
	return docker.DefaultSocket
}

// computers remembers the computers a provider was asked for, so that a
// scenario's cleanup removes exactly those from the engine.
type computers struct {
	mu  sync.Mutex
	ids []string
}

func (c *computers) add(id string) {
	c.mu.Lock()
	c.ids = append(c.ids, id)
	c.mu.Unlock()
}

// removeFrom destroys the computers on d.
func (c *computers) removeFrom(t providertest.T, d *docker.Docker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.ids {
		if err := d.Destroy(ctx, docker.ContainerPrefix+id); err != nil {
			t.Errorf("cleanup of computer %s: %v", id, err)
		}
	}
}

// engineExists asks the engine for a container or volume labelled
// label=value.
func engineExists(cli *client.Client) func(ctx context.Context, label, value string) (bool, error) {
	return func(ctx context.Context, label, value string) (bool, error) {
		f := make(client.Filters).Add("label", label+"="+value)
		cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
		if err != nil {
			return false, err
		}
		vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		if err != nil {
			return false, err
		}
		return len(cs.Items)+len(vs.Items) > 0, nil
	}
}

// recording is the docker provider, its computers remembered.
type recording struct {
	*docker.Docker
	computers
}

func (r *recording) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	r.add(spec.ComputerID)
	return r.Docker.Create(ctx, spec)
}

// TestDocker runs the suite against providers/docker on the real engine,
// with faults injected at the provider's boundary.
func TestDocker(t *testing.T) {
	cli, host := engine(t)
	providertest.Run(t, providertest.Harness{
		ID:           "docker",
		ReadyTimeout: 30 * time.Second,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			d, err := docker.New(docker.Options{Host: host, HeadlessImage: dockerImage, DesktopImage: dockerImage, Logger: log})
			if err != nil {
				t.Fatalf("docker provider: %v", err)
			}
			r := &recording{Docker: d}
			t.Cleanup(func() {
				r.removeFrom(t, d)
				d.Close()
			})
			return providertest.Target{Provider: r, Exists: engineExists(cli)}
		},
	})
}

var _ providers.Lister = (*recording)(nil)

// BenchmarkCycleDocker times a session on the real engine against the
// same on providers/fake:
//
//	go test ./providers/providertest -run '^$' -bench Cycle -benchtime 10x
func BenchmarkCycleDocker(b *testing.B) {
	host := dockerHost()
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(b.Context(), dockerImage); err != nil {
		b.Skipf("no engine or no %s (%v); start the engine and run `make images`", dockerImage, err)
	}
	d, err := docker.New(docker.Options{Host: host, HeadlessImage: dockerImage, DesktopImage: dockerImage})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	providertest.BenchmarkCycle(b, providertest.Harness{ID: "docker", New: func(t providertest.T, log *slog.Logger) providertest.Target {
		return providertest.Target{Provider: d, Exists: func(context.Context, string, string) (bool, error) { return false, nil }}
	}})
}
