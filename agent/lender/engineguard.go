package lender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// The engine guard (GuardEngine) keeps lent computers inside the Docker
// engine: each computer's network is internal, with no route anywhere, and
// the agent's egress proxy runs as a container, one per agent, on a bridge
// network of its own (its way out) and joined to every computer network at
// a fixed address (docker.ConnectEgress). The proxy container gets the
// agent's egress secret on its standard input, runs as nobody with no
// capabilities on a read-only root, forwards no packets between the
// networks it is joined to, and is removed when egress is turned
// off or the agent stops; the next start makes it again and joins it to
// the networks of the computers that still run.

// EgressImageEnv names the image of the egress proxy container; it must
// hold a Linux berth binary at /usr/bin/berth.
const EgressImageEnv = "EGRESS_IMAGE"

// DefaultEgressImage is the egress proxy container's image: the supervisor
// image (images/build.sh supervisor) holds berth.
const DefaultEgressImage = "berth/supervisor:latest"

// egressBinary is where the image holds berth.
const egressBinary = "/usr/bin/berth"

// labelEgressProxy marks the egress proxy container and its network with
// the lender id they serve.
const labelEgressProxy = "dev.berth.egress-proxy"

// egressReadyTimeout bounds the wait for a new proxy container to answer.
const egressReadyTimeout = 30 * time.Second

// engineGuard runs the egress proxy container of one agent.
type engineGuard struct {
	cli     *client.Client
	dk      *docker.Docker // EgressContainer set: joins computer networks
	name    string         // container and network name
	image   string
	secret  string
	args    []string // the proxy's command line, secret excluded
	adopted string   // label of this agent's computer networks
	log     *slog.Logger

	mu      sync.Mutex  // serializes start and stop
	running atomic.Bool // read by the status without waiting for a start
}

// egressContainerName is the egress proxy container (and its network) of
// the agent lenderID.
func egressContainerName(lenderID string) string { return "berth-egress-" + lenderID }

// newEngineGuard prepares the guard; start makes the container.
func newEngineGuard(host, lenderID, image, secret string, blocked []netip.Prefix, abuse bool, log *slog.Logger) (*engineGuard, error) {
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		return nil, fmt.Errorf("docker engine %s: %w", host, err)
	}
	name := egressContainerName(lenderID)
	dk, err := docker.New(docker.Options{Host: host, EgressContainer: name, HeadlessImage: image, DesktopImage: image, Logger: log})
	if err != nil {
		cli.Close()
		return nil, err
	}
	args := []string{"agent", "egress-proxy", "--listen", ":" + strconv.Itoa(EgressProxyPort)}
	if len(blocked) > 0 {
		ps := make([]string, len(blocked))
		for i, p := range blocked {
			ps[i] = p.String()
		}
		args = append(args, "--blocked-cidrs", strings.Join(ps, ","))
	}
	if abuse {
		args = append(args, "--abuse")
	}
	return &engineGuard{
		cli: cli, dk: dk, name: name, image: image, secret: secret, args: args,
		adopted: providers.LabelDeployment + "=" + Deployment(lenderID), log: log,
	}, nil
}

// addr is the proxy's address as computers reach it.
func (g *engineGuard) addr() string {
	return net.JoinHostPort(docker.EgressHost, strconv.Itoa(EgressProxyPort))
}

// set starts (on) or removes (off) the proxy container: the egress
// setting's hook.
func (g *engineGuard) set(ctx context.Context, on bool) error {
	if on {
		return g.start(ctx)
	}
	return g.stop(ctx)
}

// isRunning reports whether the proxy container was started and not
// removed since.
func (g *engineGuard) isRunning() bool {
	return g.running.Load()
}

// start (re)makes the proxy container, checks that it answers, and joins it
// to the networks of this agent's running computers.
func (g *engineGuard) start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running.Store(false)
	if err := g.remove(ctx); err != nil {
		return err
	}
	if _, err := g.cli.ImageInspect(ctx, g.image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("the egress proxy image %s is not on the Docker engine: build it with images/build.sh supervisor (or set %s to an image with berth at %s)", g.image, EgressImageEnv, egressBinary)
		}
		return fmt.Errorf("inspect the egress proxy image %s: %w", g.image, err)
	}
	labels := map[string]string{labelEgressProxy: g.name}
	netID, err := g.network(ctx, labels)
	if err != nil {
		return err
	}
	pids := int64(256)
	_, err = g.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: g.name,
		Config: &container.Config{
			Image: g.image, User: "65534:65534", Entrypoint: []string{egressBinary}, Cmd: g.args,
			Labels: labels, OpenStdin: true, StdinOnce: true, AttachStdin: true, WorkingDir: "/",
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(netID),
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			// Joined to every computer's network, it must not route
			// between them (a container's namespace forwards by default).
			Sysctls:   map[string]string{"net.ipv4.ip_forward": "0", "net.ipv6.conf.all.forwarding": "0"},
			LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": docker.LogFileSize, "max-file": docker.LogFiles}},
			Resources: container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20, PidsLimit: &pids},
		},
	})
	if err != nil {
		return fmt.Errorf("create the egress proxy container %s: %w", g.name, err)
	}
	att, err := g.cli.ContainerAttach(ctx, g.name, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		return fmt.Errorf("attach to the egress proxy container %s: %w", g.name, err)
	}
	defer att.Close()
	if _, err := g.cli.ContainerStart(ctx, g.name, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start the egress proxy container %s: %w", g.name, err)
	}
	if _, err := io.WriteString(att.Conn, g.secret+"\n"); err != nil {
		return fmt.Errorf("give the egress proxy container its secret: %w", err)
	}
	att.CloseWrite()
	if err := g.waitReady(ctx); err != nil {
		return err
	}
	n, err := g.dk.ConnectEgressAll(ctx, g.adopted)
	if err != nil {
		return fmt.Errorf("join the egress proxy to running computers: %w", err)
	}
	g.running.Store(true)
	g.log.Info("egress proxy container running", "container", g.name, "image", g.image, "computerNetworks", n)
	return nil
}

// networks lists the proxy's own networks (one, unless two starts raced).
func (g *engineGuard) networks(ctx context.Context) ([]string, error) {
	res, err := g.cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", labelEgressProxy+"="+g.name)})
	if err != nil {
		return nil, fmt.Errorf("list the egress proxy's networks: %w", err)
	}
	var ids []string
	for _, n := range res.Items {
		ids = append(ids, n.ID)
	}
	return ids, nil
}

// network returns the proxy's own bridge network, its way out, made if
// missing.
func (g *engineGuard) network(ctx context.Context, labels map[string]string) (string, error) {
	ids, err := g.networks(ctx)
	if err != nil {
		return "", err
	}
	if len(ids) > 0 {
		return ids[0], nil
	}
	res, err := g.cli.NetworkCreate(ctx, g.name, client.NetworkCreateOptions{Driver: "bridge", Labels: labels})
	if err != nil {
		return "", fmt.Errorf("create the egress proxy's network %s: %w", g.name, err)
	}
	return res.ID, nil
}

// waitReady runs the proxy's probe inside its container until it passes:
// the container answers on its port (reached from inside, since on Docker
// Desktop this machine cannot reach a container's address).
func (g *engineGuard) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, egressReadyTimeout)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		last = g.probe(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the egress proxy container %s did not answer within %v: %v (see docker logs %s)", g.name, egressReadyTimeout, last, g.name)
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, time.Second)):
		}
	}
}

// probe runs `berth agent egress-proxy --probe` in the container once.
func (g *engineGuard) probe(ctx context.Context) error {
	st, err := g.cli.ContainerInspect(ctx, g.name, client.ContainerInspectOptions{})
	if err != nil {
		return err
	}
	if s := st.Container.State; s == nil || !s.Running {
		return fmt.Errorf("the container is not running (exit code %d)", exitCode(st.Container.State))
	}
	x, err := g.cli.ExecCreate(ctx, g.name, client.ExecCreateOptions{
		Cmd: []string{egressBinary, "agent", "egress-proxy", "--probe", "127.0.0.1:" + strconv.Itoa(EgressProxyPort)},
	})
	if err != nil {
		return err
	}
	if _, err := g.cli.ExecStart(ctx, x.ID, client.ExecStartOptions{Detach: true}); err != nil {
		return err
	}
	for {
		res, err := g.cli.ExecInspect(ctx, x.ID, client.ExecInspectOptions{})
		if err != nil {
			return err
		}
		if !res.Running {
			if res.ExitCode != 0 {
				return fmt.Errorf("probe exit code %d", res.ExitCode)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func exitCode(s *container.State) int {
	if s == nil {
		return -1
	}
	return s.ExitCode
}

// stop removes the proxy container: computers lose their way out.
func (g *engineGuard) stop(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running.Store(false)
	return g.remove(ctx)
}

// remove force-removes the proxy container; a missing one is not an error.
func (g *engineGuard) remove(ctx context.Context) error {
	_, err := g.cli.ContainerRemove(ctx, g.name, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the egress proxy container %s: %w", g.name, err)
	}
	return nil
}

// close removes the container and its network and releases the engine.
func (g *engineGuard) close(ctx context.Context) error {
	err := g.stop(ctx)
	ids, lerr := g.networks(ctx)
	err = errors.Join(err, lerr)
	for _, id := range ids {
		if _, nerr := g.cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{}); nerr != nil && !cerrdefs.IsNotFound(nerr) {
			err = errors.Join(err, fmt.Errorf("remove the egress proxy's network %s: %w", g.name, nerr))
		}
	}
	g.dk.Close()
	g.cli.Close()
	return err
}
