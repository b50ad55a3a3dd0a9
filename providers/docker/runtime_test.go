package docker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// stock is what Docker 20.10 lists; newer engines list the same names.
var stock = []string{"runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"}

func TestChooseRuntime(t *testing.T) {
	withRunsc := append(slices.Clone(stock), "runsc")
	for _, c := range []struct {
		name          string
		setting       string
		engine        []string
		engineDefault string
		want          string
		source        RuntimeSource
		host          string // HostConfig.Runtime
	}{
		{"stock engine", "", stock, "runc", "runc", RuntimeEngineDefault, ""},
		{"runsc listed", "", withRunsc, "runc", "runsc", RuntimeDetected, "runsc"},
		{"runsc off by the default's name", "runc", withRunsc, "runc", "runc", RuntimeSet, "runc"},
		{"runsc set", "runsc", withRunsc, "runc", "runsc", RuntimeSet, "runsc"},
		{"setting trimmed", " runsc ", withRunsc, "runc", "runsc", RuntimeSet, "runsc"},
		{"another runtime set", "io.containerd.runc.v2", withRunsc, "runc", "io.containerd.runc.v2", RuntimeSet, "io.containerd.runc.v2"},
		{"runsc is the engine's default", "", withRunsc, "runsc", "runsc", RuntimeEngineDefault, ""},
		{"engine names no default", "", stock, "", "runc", RuntimeEngineDefault, ""},
		{"engine with a default of its own", "", []string{"crun", "runc"}, "crun", "crun", RuntimeEngineDefault, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ChooseRuntime(c.setting, c.engine, c.engineDefault)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != c.want || got.Source != c.source || got.hostRuntime() != c.host {
				t.Errorf("ChooseRuntime(%q, %v, %q) = %s (%s), host runtime %q; want %s (%s), host runtime %q",
					c.setting, c.engine, c.engineDefault, got.Name, got.Source, got.hostRuntime(), c.want, c.source, c.host)
			}
			if !slices.IsSorted(got.Engine) {
				t.Errorf("engine runtimes not sorted: %v", got.Engine)
			}
		})
	}
}

func TestChooseRuntimeNotListed(t *testing.T) {
	_, err := ChooseRuntime("runsc", stock, "runc")
	if !errors.Is(err, ErrRuntime) {
		t.Fatalf("err = %v, want ErrRuntime", err)
	}
	for _, want := range []string{`SANDBOX_RUNTIME="runsc"`, "io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc", "its default is runc", "daemon.json"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestRuntimeChoiceString(t *testing.T) {
	for _, c := range []struct {
		setting string
		engine  []string
		want    string
	}{
		{"", append(slices.Clone(stock), "runsc"), "runsc (detected: the engine lists runsc; SANDBOX_RUNTIME=runc turns it off)"},
		{"runc", append(slices.Clone(stock), "runsc"), "runc (set: SANDBOX_RUNTIME=runc)"},
		{"", stock, "runc (engine default: SANDBOX_RUNTIME is unset and the engine does not list runsc)"},
	} {
		got, err := ChooseRuntime(c.setting, c.engine, "runc")
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

// TestRuntimeFromEngine asks the real engine: the provider's choice is the
// one ChooseRuntime makes from the engine's /info, is logged once, and
// every computer container names it.
func TestRuntimeFromEngine(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	var logs bytes.Buffer
	d.log = slog.New(slog.NewTextHandler(&logs, nil))
	info, err := d.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range info.Info.Runtimes {
		names = append(names, n)
	}
	want, err := ChooseRuntime("", names, info.Info.DefaultRuntime)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := d.Runtime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != want.Name || got.Source != want.Source {
		t.Errorf("Runtime = %s, want %s", got, want)
	}
	if n := strings.Count(logs.String(), "sandbox runtime: "+want.String()); n != 1 {
		t.Errorf("the choice is logged %d times, want once:\n%s", n, logs.String())
	}

	m := create(t, ctx, d, testSpec(t))
	c, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Container.HostConfig.Runtime != want.Name {
		t.Errorf("computer runs under %q, want %q", c.Container.HostConfig.Runtime, want.Name)
	}
}

// TestRuntimeNotOnEngine: a SANDBOX_RUNTIME the engine lacks stops the
// provider at Prepare, and fails a create, naming the setting.
func TestRuntimeNotOnEngine(t *testing.T) {
	ctx := testContext(t, time.Minute)
	d := newTestDocker(t, ctx, Options{Runtime: "berth-no-such-runtime"})
	err := d.Prepare(ctx)
	if !errors.Is(err, ErrRuntime) || !strings.Contains(err.Error(), `SANDBOX_RUNTIME="berth-no-such-runtime"`) {
		t.Fatalf("Prepare = %v, want ErrRuntime naming the setting", err)
	}
	_, err = d.Create(ctx, testSpec(t))
	if !errors.Is(err, ErrRuntime) {
		t.Errorf("Create = %v, want ErrRuntime", err)
	}
}

// TestPrepareEngineDown: an engine that does not answer does not stop the
// supervisor; the runtime is chosen later.
func TestPrepareEngineDown(t *testing.T) {
	d, err := New(Options{Host: "unix://" + t.TempDir() + "/no.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Prepare(ctx); err != nil {
		t.Errorf("Prepare = %v, want nil", err)
	}
	if _, err := d.Runtime(ctx); err == nil || errors.Is(err, ErrRuntime) {
		t.Errorf("Runtime = %v, want the engine's error", err)
	}
}

// underGVisor reports whether d's computers run under runsc.
func underGVisor(t *testing.T, ctx context.Context, d *Docker) bool {
	t.Helper()
	c, err := d.Runtime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c.Name == DetectedRuntime
}
