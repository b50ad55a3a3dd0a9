// Package docker runs Berth computers as hardened containers on a Docker
// engine. Every computer gets its own container, its own volume for the home
// folder and its own internal network, all named after the computer and
// labelled with Berth's labels so that they can be listed and cleaned up.
package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

// ID is the provider id the package registers under.
const ID = "docker"

// Name prefixes of what the provider creates for a computer; the computer id
// follows the prefix.
const (
	ContainerPrefix = "berth-c-"
	NetworkPrefix   = "berth-n-"
	VolumePrefix    = "berth-v-"
)

// User is the user and group every computer runs as.
const User = "1000:1000"

// cleanupTimeout bounds the removal of a failed create's leftovers, which
// runs even when the create's context is done. A disk's release runs a
// helper container, which a busy engine can take tens of seconds to start
// and end; what is not removed in time is removed by a later pass.
const cleanupTimeout = 90 * time.Second

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		opts, err := OptionsFromConfig(cfg)
		if err != nil {
			return nil, err
		}
		d, err := New(opts)
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}

// Docker is a provider that runs computers on one Docker engine.
type Docker struct {
	opts Options
	cli  *client.Client
	log  *slog.Logger
	pool *netPool // nil when networks are made at start

	helpers diskHelpers // the disk quota's standing helpers (diskhelper.go)

	runtimeMu sync.Mutex
	runtime   *RuntimeChoice // nil until the engine was asked (see Runtime)
}

// New returns a provider for the engine at opts.Host. It does not contact
// the engine; the first call does.
func New(opts Options) (*Docker, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cli, err := client.New(client.WithHost(opts.Host))
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", SettingSocket, opts.Host, err)
	}
	d := &Docker{
		opts: opts,
		cli:  cli,
		log:  opts.Logger.With("component", "docker"),
	}
	d.helpers.d = d
	if opts.NetworkPool > 0 {
		d.pool = newNetPool(d, opts.NetworkPool)
	}
	return d, nil
}

// Options returns the provider's settings, defaults filled in.
func (d *Docker) Options() Options { return d.opts }

// Close removes the networks waiting in the pool and the standing disk
// helpers, and releases the provider's connections to the engine.
func (d *Docker) Close() error {
	if d.pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		d.pool.close(ctx)
		cancel()
	}
	d.helpers.close()
	return d.cli.Close()
}

// names are what the provider calls a computer's resources.
type names struct{ container, network, volume string }

func namesOf(computerID string) names {
	return names{
		container: ContainerPrefix + computerID,
		network:   NetworkPrefix + computerID,
		volume:    VolumePrefix + computerID,
	}
}

var tokenHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkSpec(s providers.Spec) error {
	if !computerID.MatchString(s.ComputerID) {
		return fmt.Errorf("computer id %q: want 1 to 128 letters, digits, '_', '.' or '-', starting with a letter or digit", s.ComputerID)
	}
	if !tokenHash.MatchString(s.TokenHash) {
		return errors.New("token hash: want the hex SHA-256 of the computer's token (64 lowercase hex digits)")
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("environment variable %q: want a name without '=' and a value without NUL", k)
		}
	}
	return nil
}

// Create starts a computer: its network and volume (created concurrently),
// then its container. It returns once the container runs. On failure it
// removes what this attempt created.
func (d *Docker) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	if err := checkSpec(spec); err != nil {
		return providers.Machine{}, fmt.Errorf("create computer: %w", err)
	}
	image, err := d.image(spec.Image)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	if spec.AttemptID == "" {
		spec.AttemptID = newAttemptID()
	}
	labels := spec.Labels()
	labels[LabelExpires] = d.expiresLabel(spec.Lease)
	start := time.Now()
	m, err := d.create(ctx, spec, image, labels)
	if err != nil {
		d.cleanup(ctx, spec.ComputerID, spec.AttemptID)
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	d.log.Info("computer started", "computer", spec.ComputerID, "attempt", spec.AttemptID,
		"image", image, "endpoint", m.Endpoint, "took", time.Since(start).Round(time.Millisecond))
	return m, nil
}

func (d *Docker) create(ctx context.Context, spec providers.Spec, image string, labels map[string]string) (providers.Machine, error) {
	if d.pool != nil {
		return d.createJoined(ctx, spec, image, labels)
	}
	n := namesOf(spec.ComputerID)

	var (
		wg                     sync.WaitGroup
		netID                  string
		netErr, volErr, imgErr error
	)
	wg.Go(func() { netID, netErr = d.createNetwork(ctx, n.network, labels) })
	wg.Go(func() { volErr = d.createHome(ctx, spec.ComputerID, image, labels) })
	wg.Go(func() { imgErr = d.checkImage(ctx, image, spec.Image) })
	wg.Wait()
	if err := joinErrors(imgErr, netErr, volErr); err != nil {
		return providers.Machine{}, err
	}

	var hosts []string
	if d.opts.EgressContainer != "" {
		// Before the container: its /etc/hosts names the proxy.
		addr, err := d.ConnectEgress(ctx, netID)
		if errors.Is(err, ErrNoEgressContainer) {
			// Egress is off: the computer has no proxy settings; the
			// proxy joins at addr if egress is turned on again.
			d.log.Info("computer started without the egress proxy on its network", "computer", spec.ComputerID, "err", err)
		} else if err != nil {
			return providers.Machine{}, err
		}
		hosts = []string{EgressHost + ":" + addr.String()}
	}

	joined := make(chan error, 1)
	go func() { joined <- d.join(ctx, netID) }()

	err := d.createContainer(ctx, spec, image, labels, n, netID, hosts)
	if err == nil {
		if _, err = d.cli.ContainerStart(ctx, n.container, client.ContainerStartOptions{}); err != nil {
			err = fmt.Errorf("start container %s: %w", n.container, d.engineErr(err))
		}
	}
	if jerr := <-joined; err == nil {
		err = jerr
	}
	if err != nil {
		return providers.Machine{}, err
	}

	ip, err := d.address(ctx, n.container, netID)
	if err != nil {
		return providers.Machine{}, err
	}
	return providers.Machine{ID: n.container, Endpoint: endpoint(ip), Labels: labels}, nil
}

// createJoined starts a computer in a network made ahead of time: it binds
// a holder (see netpool.go) while it makes the volume, then starts the
// container in the holder's network namespace.
func (d *Docker) createJoined(ctx context.Context, spec providers.Spec, image string, labels map[string]string) (providers.Machine, error) {
	n := namesOf(spec.ComputerID)
	var (
		wg                   sync.WaitGroup
		h                    holder
		hErr, volErr, imgErr error
	)
	wg.Go(func() { h, hErr = d.bindHolder(ctx, spec.ComputerID) })
	wg.Go(func() { volErr = d.createHome(ctx, spec.ComputerID, image, labels) })
	wg.Go(func() { imgErr = d.checkImage(ctx, image, spec.Image) })
	wg.Wait()
	if err := joinErrors(imgErr, hErr, volErr); err != nil {
		return providers.Machine{}, err
	}
	err := d.createContainer(ctx, spec, image, labels, n, "container:"+h.id, nil)
	if err == nil {
		if _, err = d.cli.ContainerStart(ctx, n.container, client.ContainerStartOptions{}); err != nil {
			err = fmt.Errorf("start container %s: %w", n.container, d.engineErr(err))
		}
	}
	if err != nil {
		return providers.Machine{}, err
	}
	return providers.Machine{ID: n.container, Endpoint: endpoint(h.ip), Labels: labels}, nil
}

// image returns the image reference for an image kind.
func (d *Docker) image(kind string) (string, error) {
	switch kind {
	case "", providers.ImageHeadless:
		return d.opts.HeadlessImage, nil
	case providers.ImageDesktop:
		return d.opts.DesktopImage, nil
	}
	return "", fmt.Errorf("%w: unknown image kind %q (want %q or %q)",
		providers.ErrBadImage, kind, providers.ImageHeadless, providers.ImageDesktop)
}

func (d *Docker) checkImage(ctx context.Context, ref, kind string) error {
	_, err := d.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return missingImage(ref, kind)
	}
	if err != nil {
		return fmt.Errorf("inspect image %s: %w", ref, d.engineErr(err))
	}
	return nil
}

func missingImage(ref, kind string) error {
	setting := SettingHeadlessImage
	if kind == providers.ImageDesktop {
		setting = SettingDesktopImage
	} else {
		kind = providers.ImageHeadless
	}
	return fmt.Errorf("%w: the %s image %s is not on the Docker host; build it with `make images` (or point %s at another image)",
		providers.ErrBadImage, kind, ref, setting)
}

func (d *Docker) createNetwork(ctx context.Context, name string, labels map[string]string) (string, error) {
	return d.createComputerNetwork(ctx, name, bridgeName(labels[providers.LabelComputer]), labels)
}

// bridgeNameOption names the host side of a bridge network.
const bridgeNameOption = "com.docker.network.bridge.name"

// BridgePrefix starts the host interface name of every computer network, so
// that one host firewall rule (e.g. iptables -i berth+) covers them all.
const BridgePrefix = "berth"

// bridgeName is the host interface of a computer's network: BridgePrefix and
// 40 bits of a hash of the computer id, within Linux's 15 characters.
func bridgeName(computerID string) string {
	h := sha256.Sum256([]byte(computerID))
	return BridgePrefix + hex.EncodeToString(h[:5])
}

// createVolume creates a volume (a home, or a disk volume; see quota.go).
// The engine answers a create for an existing name with that volume, so a
// volume carrying another attempt's label is a leftover and fails the
// create.
func (d *Docker) createVolume(ctx context.Context, name string, labels, driverOpts map[string]string) (volume.Volume, error) {
	res, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: labels, DriverOpts: driverOpts})
	if err != nil {
		return volume.Volume{}, fmt.Errorf("create volume %s: %w", name, d.engineErr(err))
	}
	if got := res.Volume.Labels[providers.LabelAttempt]; got != labels[providers.LabelAttempt] {
		return volume.Volume{}, fmt.Errorf("create volume %s: %w (volume of attempt %q); destroy the computer first", name, ErrLeftover, got)
	}
	return res.Volume, nil
}

// join connects the configured containers to a computer's network.
func (d *Docker) join(ctx context.Context, netID string) error {
	for _, c := range d.opts.JoinContainers {
		_, err := d.cli.NetworkConnect(ctx, netID, client.NetworkConnectOptions{Container: c})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("connect %s to the computer network (%s): %w", c, SettingJoinContainers, d.engineErr(err))
		}
	}
	return nil
}

// createContainer creates the computer's container on network netID;
// hosts are extra /etc/hosts entries (NAME:ADDR).
func (d *Docker) createContainer(ctx context.Context, spec providers.Spec, image string, labels map[string]string, n names, netID string, hosts []string) error {
	memory := d.opts.MemoryMB << 20
	pids := d.opts.Pids
	// No name service: the engine's embedded resolver would forward lookups
	// to the host's servers. Pointed at the computer's own loopback, where
	// nothing answers, every lookup fails; names are resolved by the egress
	// proxy. A computer in a holder's namespace has the holder's setting.
	var dns []netip.Addr
	if !strings.HasPrefix(netID, "container:") {
		dns = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	}
	runtime, err := d.hostRuntime(ctx)
	if err != nil {
		return err
	}
	_, err = d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: n.container,
		Config: &container.Config{
			Image:  image,
			User:   User,
			Env:    environment(spec),
			Labels: labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(netID),
			ReadonlyRootfs: true,
			Tmpfs: map[string]string{
				"/tmp": "rw,exec,nosuid,nodev,mode=1777,size=" + strconv.FormatInt(d.opts.TmpMB, 10) + "m",
			},
			DNS:         dns,
			ExtraHosts:  hosts,
			CapDrop:     []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges"},
			ShmSize:     d.opts.ShmMB << 20,
			Runtime:     runtime,
			LogConfig:   logConfig(),
			Mounts: []mount.Mount{{
				Type:   mount.TypeVolume,
				Source: n.volume,
				Target: computerd.Home,
			}},
			Resources: container.Resources{
				Memory:     memory,
				MemorySwap: memory,
				NanoCPUs:   int64(d.opts.CPUs*1e9 + 0.5),
				PidsLimit:  &pids,
			},
		},
	})
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		// The image went away since it was checked.
		if ierr := d.checkImage(ctx, image, spec.Image); ierr != nil {
			return ierr
		}
	}
	err = d.engineErr(err)
	if runtime != "" && strings.Contains(err.Error(), "runtime") {
		err = fmt.Errorf("%w (runtime %s: is it still registered with the engine?)", err, runtime)
	}
	return fmt.Errorf("create container %s: %w", n.container, err)
}

// Container logs: the json-file driver, whatever the engine's default, keeps
// at most LogFiles files of LogFileSize each, so a computer that prints
// forever holds at most 10 MB of the host's disk in logs.
const (
	LogFileSize = "5m"
	LogFiles    = "2"
)

// logConfig is the log configuration of every container the provider makes.
func logConfig() container.LogConfig {
	return container.LogConfig{
		Type:   "json-file",
		Config: map[string]string{"max-size": LogFileSize, "max-file": LogFiles},
	}
}

// environment is the computer's environment: spec.Env plus the token hash
// (when the spec has one; a warm-pool computer has a bind hash in Env
// instead) and the computer id, which take precedence.
func environment(s providers.Spec) []string {
	env := maps.Clone(s.Env)
	if env == nil {
		env = map[string]string{}
	}
	if s.TokenHash != "" {
		env[computerd.EnvTokenHash] = s.TokenHash
	}
	env[computerd.EnvComputerID] = s.ComputerID
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// address returns the container's IP on the network netID.
func (d *Docker) address(ctx context.Context, name, netID string) (netip.Addr, error) {
	res, err := d.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("inspect container %s: %w", name, d.engineErr(err))
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		for _, ep := range ns.Networks {
			if ep != nil && ep.NetworkID == netID && ep.IPAddress.IsValid() {
				return ep.IPAddress, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("container %s has no address on its network", name)
}

func endpoint(ip netip.Addr) string {
	return "http://" + net.JoinHostPort(ip.Unmap().String(), strconv.Itoa(computerd.Port))
}

// cleanup removes what the attempt created, best effort, even when ctx is done.
func (d *Docker) cleanup(ctx context.Context, computerID, attemptID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := d.removeContainer(ctx, ContainerPrefix+computerID, attemptID); err != nil {
		d.log.Warn("cleanup after failed create", "computer", computerID, "attempt", attemptID, "err", err)
	}
	if err := d.removeResources(ctx, computerID, attemptID); err != nil {
		d.log.Warn("cleanup after failed create", "computer", computerID, "attempt", attemptID, "err", err)
	}
	if err := d.removeHolder(ctx, HolderPrefix+computerID); err != nil {
		d.log.Warn("cleanup after failed create", "computer", computerID, "attempt", attemptID, "err", err)
	}
}

// Destroy removes the computer's container, network and volume. machineID is
// the container's name (as Create returns it) or id. A computer that is
// already gone, wholly or in part, is not an error.
func (d *Docker) Destroy(ctx context.Context, machineID string) error {
	if machineID == "" {
		return errors.New("destroy computer: empty machine id")
	}
	id, err := d.removeContainer(ctx, machineID, "")
	if err != nil {
		return fmt.Errorf("destroy computer %s: %w", machineID, err)
	}
	if id == "" {
		return nil // neither the container nor a name to find the rest by
	}
	if err := d.removeResources(ctx, id, ""); err != nil {
		return fmt.Errorf("destroy computer %s: %w", machineID, err)
	}
	if err := d.removeHolder(ctx, HolderPrefix+id); err != nil {
		return fmt.Errorf("destroy computer %s: %w", machineID, err)
	}
	d.log.Info("computer destroyed", "computer", id, "machine", machineID)
	return nil
}

// removeContainer force-removes a Berth container and returns its computer
// id. With attemptID set, it removes the container only if that attempt
// created it. A missing container is not an error; the computer id is then
// taken from the name when it has Berth's form.
func (d *Docker) removeContainer(ctx context.Context, ref, attemptID string) (string, error) {
	res, err := d.cli.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		if id, ok := strings.CutPrefix(ref, ContainerPrefix); ok && computerID.MatchString(id) {
			return id, nil
		}
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("inspect container %s: %w", ref, d.engineErr(err))
	}
	c := res.Container
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	if labels[providers.LabelManaged] != "true" {
		return "", fmt.Errorf("%w: %s", ErrNotManaged, ref)
	}
	id := labels[providers.LabelComputer]
	if id == "" {
		id = strings.TrimPrefix(strings.TrimPrefix(c.Name, "/"), ContainerPrefix)
	}
	if attemptID != "" && labels[providers.LabelAttempt] != attemptID {
		return id, nil
	}
	_, err = d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return id, nil
	case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "in progress"):
		return id, d.waitRemoved(ctx, c.ID)
	}
	return id, fmt.Errorf("remove container %s: %w", ref, d.engineErr(err))
}

// waitRemoved waits for a removal started elsewhere to finish.
func (d *Docker) waitRemoved(ctx context.Context, id string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		_, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for removal of container %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

// labelFilter selects Berth's resources of a computer, and of one attempt
// when attemptID is set.
func labelFilter(computerID, attemptID string) client.Filters {
	f := make(client.Filters).Add("label", providers.LabelManaged+"=true")
	if computerID != "" {
		f.Add("label", providers.LabelComputer+"="+computerID)
	}
	if attemptID != "" {
		f.Add("label", providers.LabelAttempt+"="+attemptID)
	}
	return f
}

// removeResources removes the networks and volumes labelled with the computer
// (and attempt) id. Containers still attached to a network, such as the
// JoinContainers, are disconnected first.
func (d *Docker) removeResources(ctx context.Context, computerID, attemptID string) error {
	f := labelFilter(computerID, attemptID)
	var (
		wg             sync.WaitGroup
		netErr, volErr error
	)
	wg.Go(func() {
		res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
		if err != nil {
			netErr = fmt.Errorf("list networks: %w", d.engineErr(err))
			return
		}
		var errs []error
		for _, nw := range res.Items {
			errs = append(errs, d.removeNetwork(ctx, nw.ID, nw.Name))
		}
		netErr = errors.Join(errs...)
	})
	wg.Go(func() {
		vs, err := d.volumesOf(ctx, computerID, attemptID)
		if err != nil {
			volErr = err
			return
		}
		volErr = d.removeVolumes(ctx, vs)
	})
	wg.Wait()
	return joinErrors(netErr, volErr)
}

func (d *Docker) removeNetwork(ctx context.Context, id, name string) error {
	res, err := d.cli.NetworkInspect(ctx, id, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect network %s: %w", name, d.engineErr(err))
	}
	for c := range res.Network.Containers {
		_, err := d.cli.NetworkDisconnect(ctx, id, client.NetworkDisconnectOptions{Container: c, Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("disconnect %s from network %s: %w", c, name, d.engineErr(err))
		}
	}
	if _, err := d.cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove network %s: %w", name, d.engineErr(err))
	}
	d.releaseSubnets(res.Network.IPAM.Config)
	return nil
}

// List returns every machine on the engine that carries Berth's labels: each
// container, and each computer whose network or volume outlived its
// container (ID is then the container name it had, so Destroy removes the
// rest). Labels are the dev.berth.* labels; Endpoint is empty when the
// container does not run.
func (d *Docker) List(ctx context.Context) ([]providers.Machine, error) {
	f := labelFilter("", "")
	var (
		wg               sync.WaitGroup
		cs               client.ContainerListResult
		ns               client.NetworkListResult
		vs               client.VolumeListResult
		cErr, nErr, vErr error
	)
	wg.Go(func() { cs, cErr = d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}) })
	wg.Go(func() { ns, nErr = d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f}) })
	wg.Go(func() { vs, vErr = d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f}) })
	var hs client.ContainerListResult
	var hErr error
	wg.Go(func() {
		hs, hErr = d.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", labelHolder+"=true")})
	})
	wg.Wait()
	if hErr != nil {
		return nil, fmt.Errorf("list computers: %w", d.engineErr(hErr))
	}
	holderIP := map[string]netip.Addr{}
	for _, c := range hs.Items {
		if len(c.Names) == 0 || c.NetworkSettings == nil {
			continue
		}
		for _, ep := range c.NetworkSettings.Networks {
			if ep != nil && ep.IPAddress.IsValid() {
				holderIP[strings.TrimPrefix(c.Names[0], "/")] = ep.IPAddress
			}
		}
	}
	if err := joinErrors(d.engineErr(cErr), d.engineErr(nErr), d.engineErr(vErr)); err != nil {
		return nil, fmt.Errorf("list computers: %w", err)
	}

	seen := map[string]bool{}
	var out []providers.Machine
	for _, c := range cs.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		id := c.Labels[providers.LabelComputer]
		if id == "" {
			id = strings.TrimPrefix(name, ContainerPrefix)
		}
		seen[id] = true
		m := providers.Machine{ID: name, Labels: berthLabels(c.Labels)}
		if c.State == container.StateRunning && c.NetworkSettings != nil {
			if ep := c.NetworkSettings.Networks[NetworkPrefix+id]; ep != nil && ep.IPAddress.IsValid() {
				m.Endpoint = endpoint(ep.IPAddress)
			}
		}
		if ip, ok := holderIP[HolderPrefix+id]; ok && c.State == container.StateRunning && m.Endpoint == "" {
			m.Endpoint = endpoint(ip)
		}
		out = append(out, m)
	}
	orphan := func(labels map[string]string) {
		id := labels[providers.LabelComputer]
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		out = append(out, providers.Machine{ID: ContainerPrefix + id, Labels: berthLabels(labels)})
	}
	for _, nw := range ns.Items {
		orphan(nw.Labels)
	}
	for _, v := range vs.Items {
		orphan(v.Labels)
	}
	slices.SortFunc(out, func(a, b providers.Machine) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// berthLabels returns the dev.berth.* labels of labels.
func berthLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "dev.berth.") {
			out[k] = v
		}
	}
	return out
}

// Stats is one sample of a computer's resource use.
type Stats struct {
	CPUTime          time.Duration // CPU time used since the container started
	MemoryBytes      uint64        // memory in use, page cache that can be dropped excluded
	MemoryLimitBytes uint64
	Pids             uint64 // processes and threads
	PidsLimit        uint64
}

// Stats samples a computer's resource use.
func (d *Docker) Stats(ctx context.Context, machineID string) (Stats, error) {
	res, err := d.cli.ContainerStats(ctx, machineID, client.ContainerStatsOptions{})
	if cerrdefs.IsNotFound(err) {
		return Stats{}, fmt.Errorf("stats of %s: %w", machineID, providers.ErrNotFound)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", machineID, d.engineErr(err))
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", machineID, err)
	}
	mem := s.MemoryStats.Usage
	// As docker stats does: page cache the kernel can drop is not in use.
	for _, k := range []string{"total_inactive_file", "inactive_file"} {
		if v, ok := s.MemoryStats.Stats[k]; ok {
			if v < mem {
				mem -= v
			}
			break
		}
	}
	return Stats{
		CPUTime:          time.Duration(s.CPUStats.CPUUsage.TotalUsage),
		MemoryBytes:      mem,
		MemoryLimitBytes: s.MemoryStats.Limit,
		Pids:             s.PidsStats.Current,
		PidsLimit:        s.PidsStats.Limit,
	}, nil
}

// engineErr marks errors that mean the engine cannot be reached.
func (d *Docker) engineErr(err error) error {
	if err == nil || errors.Is(err, providers.ErrUnavailable) {
		return err
	}
	if client.IsErrConnectionFailed(err) || cerrdefs.IsUnavailable(err) {
		return fmt.Errorf("%w: Docker engine at %s: %w", providers.ErrUnavailable, d.opts.Host, err)
	}
	return err
}

// joinErrors joins the errors of concurrent calls, or returns the first that
// says the engine is unreachable, which explains the others.
func joinErrors(errs ...error) error {
	for _, err := range errs {
		if errors.Is(err, providers.ErrUnavailable) {
			return err
		}
	}
	return errors.Join(errs...)
}

func newAttemptID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var _ providers.Provider = (*Docker)(nil)
var _ providers.Lister = (*Docker)(nil)
var _ providers.GarbageCollector = (*Docker)(nil)
var _ providers.Warmer = (*Docker)(nil)
