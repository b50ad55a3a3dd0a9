package providertest_test

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// requireRunsc is set by make test-runsc, which registers runsc with the
// engine for the test's time: without runsc the test fails instead of
// skipping.
const requireRunsc = "BERTH_REQUIRE_RUNSC"

// TestDockerRunsc runs the suite with computers under gVisor. The provider
// is built from the supervisor's settings with SANDBOX_RUNTIME unset, so
// it must find runsc on the engine itself; each computer is checked to run
// under runsc, and to see gVisor's kernel rather than the host's.
//
//	make test-runsc
func TestDockerRunsc(t *testing.T) {
	cli, host := engine(t)
	ctx := testkit.ContextTimeout(t, time.Minute)
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Info.Runtimes[docker.DetectedRuntime]; !ok {
		msg := "the engine does not list runsc (it lists " + strings.Join(slices.Sorted(maps.Keys(info.Info.Runtimes)), ", ") +
			"): run `make test-runsc`, which builds gVisor's runsc, registers it with the engine while the test runs, and unregisters it"
		if testkit.Required(requireRunsc) {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if v := os.Getenv(docker.SettingRuntime); v != "" {
		t.Fatalf("%s=%s: unset it, this test checks that runsc is detected", docker.SettingRuntime, v)
	}
	settings := map[string]string{
		docker.SettingSocket:        host,
		docker.SettingHeadlessImage: dockerImage,
		docker.SettingDesktopImage:  dockerImage,
	}
	cfg := providers.Config{Getenv: func(k string) string { return settings[k] }}

	// What berth providers shows.
	found := (*docker.Docker)(nil).Probe(ctx, cfg)
	if len(found) != 1 || found[0].Name != "runtime" || !strings.HasPrefix(found[0].Value, "runsc (detected: ") {
		t.Fatalf("berth providers would show %+v, want runtime runsc (detected ...)", found)
	}
	hostKernel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}

	providertest.Run(t, providertest.Harness{
		ID: "docker",
		// A runsc computer boots its own kernel: give it more than runc's.
		ReadyTimeout: 60 * time.Second,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			cfg := cfg
			cfg.Logger = log
			opts, err := docker.OptionsFromConfig(cfg)
			if err != nil {
				t.Fatalf("docker settings: %v", err)
			}
			d, err := docker.New(opts)
			if err != nil {
				t.Fatalf("docker provider: %v", err)
			}
			if err := d.Prepare(t.Context()); err != nil {
				t.Fatalf("prepare: %v", err)
			}
			if c, err := d.Runtime(t.Context()); err != nil || c.Name != "runsc" || c.Source != docker.RuntimeDetected {
				t.Fatalf("runtime = %s, %v; want runsc, detected", c, err)
			}
			r := &underRunsc{recording: recording{Docker: d}, t: t, cli: cli, hostKernel: strings.TrimSpace(string(hostKernel))}
			t.Cleanup(func() {
				r.removeFrom(t, d)
				d.Close()
			})
			return providertest.Target{Provider: r, Exists: engineExists(cli)}
		},
	})
}

// underRunsc is the recording docker provider that checks every computer
// it creates runs under runsc.
type underRunsc struct {
	recording
	t          providertest.T
	cli        *client.Client
	hostKernel string
}

func (r *underRunsc) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	m, err := r.recording.Create(ctx, spec)
	if err != nil {
		return m, err
	}
	c, err := r.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		r.t.Errorf("inspect computer %s: %v", m.ID, err)
		return m, nil
	}
	if got := c.Container.HostConfig.Runtime; got != docker.DetectedRuntime {
		r.t.Errorf("computer %s runs under %q, want %s", m.ID, got, docker.DetectedRuntime)
	}
	// gVisor's own kernel answers uname and the kernel log.
	out := execIn(r.t, ctx, r.cli, m.ID, "uname -r; dmesg | head -n 1")
	if !strings.Contains(out, "gvisor") || !strings.Contains(out, "Starting gVisor") || strings.Contains(out, r.hostKernel) {
		r.t.Errorf("computer %s does not see gVisor's kernel (the host's is %s):\n%s", m.ID, r.hostKernel, out)
	}
	return m, nil
}

// execIn runs a shell script in a container as its user and returns its
// output, stdout then stderr.
func execIn(t providertest.T, ctx context.Context, cli *client.Client, ctr, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ex, err := cli.ExecCreate(ctx, ctr, client.ExecCreateOptions{Cmd: []string{"/bin/sh", "-c", script}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Errorf("exec %q in %s: %v", script, ctr, err)
		return ""
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Errorf("exec %q in %s: %v", script, ctr, err)
		return ""
	}
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Errorf("exec %q in %s: %v", script, ctr, err)
	}
	return stdout.String() + stderr.String()
}

var _ providers.Lister = (*underRunsc)(nil)
