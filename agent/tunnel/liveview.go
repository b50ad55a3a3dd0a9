package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"time"

	"github.com/berthdev/berth/agent/turnfwd"
	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// Live view of a tunnelled desktop computer. The supervisor signals to its
// computerd through the tunnel like every other call; the video goes
// through a TURN relay. The computer's network reaches only this host, so
// the runner forwards one port on the docker0 address to the relay its
// owner named (--turn-relay, Options.TURNRelay) and gives the computer that
// address. The relay a supervisor names in a claim (TURN_PUBLIC_HOST and
// TURN_PORT) is never dialled: the runner does not know its supervisor,
// and acts on no address one names. Without --turn-relay a desktop
// computer runs without live view, and the runner says so at start.

// turnRun is the runner's TURN forwarder and how to close its port in the
// host firewall; a nil *turnRun is no live view.
type turnRun struct {
	fwd     *turnfwd.Forwarder
	unguard func(ctx context.Context) error // nil: nothing was opened
}

// startTURN starts the forwarder for a desktop run with a relay, opening
// its port to computers when the runner's own guard closed the host.
// A relay that is not HOST:PORT, or does not resolve, stops the run.
func startTURN(ctx context.Context, opts Options, guarded bool, log *slog.Logger) (*turnRun, error) {
	if opts.Image != providers.ImageDesktop {
		return nil, nil
	}
	if opts.TURNRelay == "" {
		log.Warn("live view off: a desktop computer needs --turn-relay HOST:PORT, the supervisor's TURN relay")
		return nil, nil
	}
	relay, err := turnfwd.ParseRelay(opts.TURNRelay)
	if err != nil {
		return nil, fmt.Errorf("--turn-relay: %w", err)
	}
	host := opts.TURNForwardHost
	if host == "" {
		ip, err := docker.BridgeIPv4()
		if err != nil {
			return nil, fmt.Errorf("live view: no docker0 address for the TURN forwarder: %w", err)
		}
		host = ip.String()
	}
	f, err := turnfwd.Start(host, relay.String(), log)
	if err != nil {
		return nil, fmt.Errorf("live view: %w", err)
	}
	t := &turnRun{fwd: f}
	if guarded {
		if err := docker.AllowTURN(ctx, f.Port()); err != nil {
			f.Close()
			return nil, fmt.Errorf("live view: cannot open the TURN forwarder's port %d to the computer: %w", f.Port(), err)
		}
		t.unguard = func(ctx context.Context) error { return docker.UnguardTURN(ctx, f.Port()) }
	}
	return t, nil
}

// env returns env with the supervisor's TURN variables replaced by the
// forwarder's, or removed when there is none.
func (t *turnRun) env(env map[string]string) map[string]string {
	out := withoutTURNEnv(env)
	if t == nil {
		return out
	}
	if out == nil {
		out = map[string]string{}
	}
	out[desktop.EnvTURNHost] = t.fwd.Host()
	out[desktop.EnvTURNPort] = strconv.Itoa(t.fwd.Port())
	return out
}

// addr is the forwarder's address as computers reach it, or empty.
func (t *turnRun) addr() string {
	if t == nil {
		return ""
	}
	return net.JoinHostPort(t.fwd.Host(), strconv.Itoa(t.fwd.Port()))
}

// close stops the forwarder and closes its port in the host firewall.
func (t *turnRun) close(log *slog.Logger) {
	if t == nil {
		return
	}
	t.fwd.Close()
	if t.unguard == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.unguard(ctx); err != nil {
		log.Warn("could not close the TURN forwarder's port in the host firewall", "port", t.fwd.Port(), "err", err)
	}
}

// withoutTURNEnv returns env without the TURN variables a supervisor sets.
func withoutTURNEnv(env map[string]string) map[string]string {
	_, host := env[desktop.EnvTURNHost]
	_, port := env[desktop.EnvTURNPort]
	if !host && !port {
		return env
	}
	out := maps.Clone(env)
	delete(out, desktop.EnvTURNHost)
	delete(out, desktop.EnvTURNPort)
	return out
}
