package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/providers"
)

// DetectedRuntime is the runtime computers run under, unless
// SANDBOX_RUNTIME says otherwise, whenever the engine lists it: gVisor's
// runsc, which gives each computer a kernel of its own in user space.
const DetectedRuntime = "runsc"

// RuntimeSource says why computers run under a runtime.
type RuntimeSource string

// The reasons for a runtime.
const (
	// RuntimeSet: SANDBOX_RUNTIME names it.
	RuntimeSet RuntimeSource = "set"
	// RuntimeDetected: SANDBOX_RUNTIME is unset and the engine lists
	// DetectedRuntime.
	RuntimeDetected RuntimeSource = "detected"
	// RuntimeEngineDefault: SANDBOX_RUNTIME is unset and the engine does
	// not list DetectedRuntime (or it is the engine's default already).
	RuntimeEngineDefault RuntimeSource = "engine default"
)

// RuntimeChoice is the OCI runtime a provider's computers run under, and
// why.
type RuntimeChoice struct {
	// Name is the runtime, never empty.
	Name   string
	Source RuntimeSource
	// Engine lists the runtimes the engine has, sorted, and EngineDefault
	// is the one it uses when a container names none.
	Engine        []string
	EngineDefault string
	// Checkpoints reports whether the engine can checkpoint containers
	// (dockerd --experimental), which suspending a computer needs.
	Checkpoints bool
}

// String says which runtime and why, as the provider logs it at start and
// `berth providers` shows it.
func (c RuntimeChoice) String() string {
	switch c.Source {
	case RuntimeDetected:
		return fmt.Sprintf("%s (detected: the engine lists %s; %s=%s turns it off)", c.Name, DetectedRuntime, SettingRuntime, c.EngineDefault)
	case RuntimeSet:
		return fmt.Sprintf("%s (set: %s=%s)", c.Name, SettingRuntime, c.Name)
	default:
		return fmt.Sprintf("%s (engine default: %s is unset and the engine does not list %s)", c.Name, SettingRuntime, DetectedRuntime)
	}
}

// hostRuntime is what a container's HostConfig.Runtime gets: empty for the
// engine's default, so that the engine's own setting applies.
func (c RuntimeChoice) hostRuntime() string {
	if c.Source == RuntimeEngineDefault {
		return ""
	}
	return c.Name
}

// ChooseRuntime decides which runtime computers run under, from the
// SANDBOX_RUNTIME setting (empty when unset) and the runtimes the engine
// lists with its default (the engine's /info Runtimes and DefaultRuntime):
//
//   - set: that runtime, which the engine must list (a runtime it does not
//     list is an ErrRuntime naming the setting and the runtimes it has);
//     the engine's default by name (runc on a stock engine) turns
//     detection off;
//   - unset, and the engine lists runsc: runsc (detected);
//   - unset otherwise: the engine's default.
func ChooseRuntime(setting string, engine []string, engineDefault string) (RuntimeChoice, error) {
	c := RuntimeChoice{Engine: slices.Sorted(slices.Values(engine)), EngineDefault: engineDefault}
	c.Engine = slices.Compact(c.Engine)
	if c.EngineDefault == "" {
		c.EngineDefault = "runc" // what every engine defaults to unless told
	}
	setting = strings.TrimSpace(setting)
	switch {
	case setting != "":
		if !slices.Contains(c.Engine, setting) {
			return RuntimeChoice{}, fmt.Errorf("%w: %s=%q is not a runtime the engine has (it has %s; its default is %s): register it with the engine (\"runtimes\" in /etc/docker/daemon.json) or unset %s",
				ErrRuntime, SettingRuntime, setting, strings.Join(c.Engine, ", "), c.EngineDefault, SettingRuntime)
		}
		c.Name, c.Source = setting, RuntimeSet
	case slices.Contains(c.Engine, DetectedRuntime) && c.EngineDefault != DetectedRuntime:
		c.Name, c.Source = DetectedRuntime, RuntimeDetected
	default:
		c.Name, c.Source = c.EngineDefault, RuntimeEngineDefault
	}
	return c, nil
}

// runtimeTimeout bounds the question to the engine that chooses the
// runtime.
const runtimeTimeout = 15 * time.Second

// Runtime returns the runtime the provider's computers run under, asking
// the engine which runtimes it has the first time (see ChooseRuntime), and
// logs the choice then. The choice holds for the provider's life; an
// engine that cannot be asked, or lacks the runtime SANDBOX_RUNTIME names,
// is an error, and the next call asks again.
func (d *Docker) Runtime(ctx context.Context) (RuntimeChoice, error) {
	d.runtimeMu.Lock()
	defer d.runtimeMu.Unlock()
	if d.runtime != nil {
		return *d.runtime, nil
	}
	ctx, cancel := context.WithTimeout(ctx, runtimeTimeout)
	defer cancel()
	c, err := engineRuntime(ctx, d.cli, d.opts.Runtime)
	if err != nil {
		return RuntimeChoice{}, err
	}
	d.runtime = &c
	d.log.Info("sandbox runtime: "+c.String(), "runtime", c.Name, "source", string(c.Source), "engine_runtimes", strings.Join(c.Engine, ","))
	return c, nil
}

// engineRuntime asks the engine for its runtimes and chooses one.
func engineRuntime(ctx context.Context, cli *client.Client, setting string) (RuntimeChoice, error) {
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return RuntimeChoice{}, fmt.Errorf("choose the sandbox runtime: ask the engine for its runtimes: %w", err)
	}
	c, err := ChooseRuntime(setting, slices.Collect(maps.Keys(info.Info.Runtimes)), info.Info.DefaultRuntime)
	c.Checkpoints = info.Info.ExperimentalBuild
	return c, err
}

// hostRuntime is the runtime new containers name (empty for the engine's
// default).
func (d *Docker) hostRuntime(ctx context.Context) (string, error) {
	c, err := d.Runtime(ctx)
	if err != nil {
		return "", err
	}
	return c.hostRuntime(), nil
}

// holderRuntime is the runtime of the network holders (netpool.go): runc
// whenever the engine has it, whatever computers run under. A holder only
// owns a network namespace for its computer to join; under runsc it
// would take the namespace's interface into its own user-space network
// stack, and the computer that joins would find no interface but
// loopback.
func (d *Docker) holderRuntime(ctx context.Context) (string, error) {
	c, err := d.Runtime(ctx)
	if err != nil {
		return "", err
	}
	if slices.Contains(c.Engine, "runc") {
		return "runc", nil
	}
	return c.hostRuntime(), nil
}

// Prepare implements providers.Preparer: it chooses the runtime before the
// supervisor serves, so that the choice is logged at start and a
// SANDBOX_RUNTIME the engine lacks stops the supervisor. An engine that
// does not answer is only logged: the runtime is then chosen at the first
// computer.
func (d *Docker) Prepare(ctx context.Context) error {
	_, err := d.Runtime(ctx)
	if err == nil || errors.Is(err, ErrRuntime) {
		return err
	}
	d.log.Warn("the engine did not answer at start; the sandbox runtime is chosen at the first computer", "err", err)
	return nil
}

// Probe implements providers.Prober: the runtime computers would run
// under with cfg's settings, and why, as `berth providers` shows it.
func (*Docker) Probe(ctx context.Context, cfg providers.Config) []providers.Fact {
	fact := func(v string) []providers.Fact { return []providers.Fact{{Name: "runtime", Value: v}} }
	opts, err := OptionsFromConfig(cfg)
	if err != nil {
		return fact("unknown: " + err.Error())
	}
	cli, err := client.New(client.WithHost(opts.Host))
	if err != nil {
		return fact("unknown: " + err.Error())
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, runtimeTimeout)
	defer cancel()
	c, err := engineRuntime(ctx, cli, opts.Runtime)
	if err != nil {
		if errors.Is(err, ErrRuntime) {
			return fact("error: " + strings.TrimPrefix(err.Error(), ErrRuntime.Error()+": "))
		}
		return fact(fmt.Sprintf("unknown: the engine at %s did not answer (%v)", opts.Host, err))
	}
	return fact(c.String())
}

var (
	_ providers.Preparer = (*Docker)(nil)
	_ providers.Prober   = (*Docker)(nil)
)
