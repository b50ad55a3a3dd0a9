package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// A computer's network is made ahead of time. Creating an internal network
// and starting a container on it costs the engine two rounds of iptables
// work (the network's isolation rules, then the embedded DNS resolver's
// rules inside the container), more than the container start itself. So the
// provider keeps a few holders ready: an internal network with a tiny
// container that owns its network namespace. A computer joins a holder's
// namespace (network mode container:<holder>), and starts with no network
// work at all. Each holder serves one computer and is removed with it.
//
// Holders carry their own labels (never dev.berth.managed, so they are not
// machines) and the host and pid of the process whose pool they are in; a
// pool left behind by a dead process on this host is removed when the next
// pool starts.

// Names and labels of holders.
const (
	HolderPoolPrefix   = "berth-p-" // a holder waiting in the pool
	HolderPrefix       = "berth-h-" // a holder bound to a computer: berth-h-<computer id>
	labelHolder        = "dev.berth.holder"
	labelHolderOwner   = "dev.berth.holder-owner"
	labelHolderNetwork = "dev.berth.holder-network" // the holder's network, by name
)

// orphanAfter is how long a bound holder may wait for its computer.
const orphanAfter = 10 * time.Minute

type holder struct {
	id, name string
	netID    string
	ip       netip.Addr
	made     time.Time
}

type netPool struct {
	d     *Docker
	size  int
	owner string

	mu      sync.Mutex
	ready   []holder
	started bool
	wake    chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

func newNetPool(d *Docker, size int) *netPool {
	host, _ := os.Hostname()
	return &netPool{d: d, size: size, owner: host + "/" + strconv.Itoa(os.Getpid()), wake: make(chan struct{}, 1)}
}

// Warm starts filling the pool in the background; Create calls it too.
// It also checks the range computer networks take their subnets from
// (subnets.go), so that a range that cannot be used is reported at start.
func (d *Docker) Warm(ctx context.Context) {
	if _, err := d.subnets(ctx); err != nil {
		d.log.Error("computer networks cannot be made; starts will fail until this is fixed", "err", err)
	}
	if d.pool != nil {
		d.pool.start()
	}
}

func (p *netPool) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	ctx, cancel := context.WithCancel(context.Background())
	p.stop, p.done = cancel, make(chan struct{})
	go p.fill(ctx)
}

// fill keeps size holders ready until ctx ends.
func (p *netPool) fill(ctx context.Context) {
	defer close(p.done)
	p.collect(ctx)
	lastCollect := time.Now()
	wait := time.Second
	for {
		if time.Since(lastCollect) > orphanAfter/2 {
			p.collect(ctx)
			lastCollect = time.Now()
		}
		p.retire(ctx)
		p.mu.Lock()
		need := len(p.ready) < p.size
		p.mu.Unlock()
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			case <-time.After(orphanAfter / 2):
			}
			continue
		}
		h, err := p.d.newHolder(ctx, HolderPoolPrefix+randomHex(6))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.d.log.Warn("network pool: make a holder", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, time.Minute)
			continue
		}
		wait = time.Second
		p.mu.Lock()
		p.ready = append(p.ready, h)
		p.mu.Unlock()
	}
}

// retire removes the holders that waited PoolMaxWait: their expiry label
// leaves room for one lease after that, no more (garbage.go).
func (p *netPool) retire(ctx context.Context) {
	now := p.d.opts.Clock.Now()
	p.mu.Lock()
	var old []holder
	p.ready = slices.DeleteFunc(p.ready, func(h holder) bool {
		if now.Sub(h.made) >= PoolMaxWait {
			old = append(old, h)
			return true
		}
		return false
	})
	p.mu.Unlock()
	for _, h := range old {
		if err := p.d.removeHolder(ctx, h.name); err != nil {
			p.d.log.Warn("network pool: retire a holder", "holder", h.name, "err", err)
		}
	}
}

// take returns a ready holder, or false when the pool is empty.
func (p *netPool) take() (holder, bool) {
	p.start()
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	// One that waited too long is left for retire, which the wake runs.
	now := p.d.opts.Clock.Now()
	i := slices.IndexFunc(p.ready, func(h holder) bool { return now.Sub(h.made) < PoolMaxWait })
	if i < 0 {
		return holder{}, false
	}
	h := p.ready[i]
	p.ready = slices.Delete(p.ready, i, i+1)
	return h, true
}

// close stops the filler and removes the holders still waiting.
func (p *netPool) close(ctx context.Context) {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started {
		return
	}
	p.stop()
	<-p.done
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, h := range ready {
		p.d.removeHolder(ctx, h.name)
	}
}

// collect removes pool holders of processes on this host that are gone,
// bound holders whose computer never came (a create cut short) after
// orphanAfter, and holder networks left without their holder.
func (p *netPool) collect(ctx context.Context) {
	defer p.collectNetworks(ctx)
	host, _ := os.Hostname()
	res, err := p.d.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelHolder+"=true")})
	if err != nil {
		return
	}
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if id, bound := strings.CutPrefix(name, HolderPrefix); bound {
			if time.Since(time.Unix(c.Created, 0)) < orphanAfter {
				continue
			}
			if _, err := p.d.cli.ContainerInspect(ctx, ContainerPrefix+id, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
				p.d.removeHolder(ctx, name)
			}
			continue
		}
		owner := c.Labels[labelHolderOwner]
		h, pid, ok := strings.Cut(owner, "/")
		if !strings.HasPrefix(name, HolderPoolPrefix) || !ok || h != host || owner == p.owner {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && processGone(n) {
			p.d.removeHolder(ctx, name)
		}
	}
}

// newHolder makes an internal network and a holder container on it, started.
func (d *Docker) newHolder(ctx context.Context, name string) (holder, error) {
	owner := ""
	if d.pool != nil {
		owner = d.pool.owner
	}
	labels := map[string]string{labelHolder: "true", labelHolderOwner: owner, labelHolderNetwork: NetworkPrefix + name,
		LabelExpires: d.expiresLabel(PoolMaxWait + MaxLease)}
	netID, err := d.createComputerNetwork(ctx, NetworkPrefix+name, bridgeName(name), labels)
	if err != nil {
		return holder{}, fmt.Errorf("create network for %s: %w", name, err)
	}
	h := holder{name: name, netID: netID, made: d.opts.Clock.Now()}
	fail := func(err error) (holder, error) {
		d.removeHolder(context.WithoutCancel(ctx), name)
		d.removeNetwork(context.WithoutCancel(ctx), h.netID, NetworkPrefix+name)
		return holder{}, err
	}
	if err := d.join(ctx, h.netID); err != nil {
		return fail(err)
	}
	memory, pids := int64(32<<20), int64(16)
	runtime, err := d.holderRuntime(ctx)
	if err != nil {
		return fail(err)
	}
	cres, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image: d.opts.HeadlessImage, User: User, Labels: labels,
			Entrypoint: []string{"/usr/local/bin/computerd"}, Cmd: []string{"pause"},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(h.netID),
			ReadonlyRootfs: true,
			DNS:            []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})},
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			Runtime:        runtime,
			LogConfig:      logConfig(),
			Resources:      container.Resources{Memory: memory, MemorySwap: memory, PidsLimit: &pids},
		},
	})
	if err != nil {
		return fail(fmt.Errorf("create holder %s: %w", name, d.engineErr(err)))
	}
	h.id = cres.ID
	if _, err := d.cli.ContainerStart(ctx, h.id, client.ContainerStartOptions{}); err != nil {
		return fail(fmt.Errorf("start holder %s: %w", name, d.engineErr(err)))
	}
	ip, err := d.address(ctx, h.id, h.netID)
	if err != nil {
		return fail(err)
	}
	h.ip = ip
	return h, nil
}

// bindHolder gives a computer its network: a ready holder renamed after the
// computer, or a new one when the pool is empty.
func (d *Docker) bindHolder(ctx context.Context, computerID string) (holder, error) {
	name := HolderPrefix + computerID
	for {
		h, ok := d.pool.take()
		if !ok {
			return d.newHolder(ctx, name)
		}
		_, err := d.cli.ContainerRename(ctx, h.id, client.ContainerRenameOptions{NewName: name})
		if err == nil {
			h.name = name
			return h, nil
		}
		if !cerrdefs.IsNotFound(err) {
			d.removeHolder(context.WithoutCancel(ctx), h.name)
			return holder{}, fmt.Errorf("bind holder %s: %w", h.name, d.engineErr(err))
		}
		// Removed under us: take the next.
	}
}

// removeHolder removes a holder container and its networks. A missing one
// is not an error.
func (d *Docker) removeHolder(ctx context.Context, name string) error {
	res, err := d.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect holder %s: %w", name, d.engineErr(err))
	}
	if res.Container.Config == nil || res.Container.Config.Labels[labelHolder] != "true" {
		return fmt.Errorf("%w: %s is not a network holder", ErrNotManaged, name)
	}
	var nets []string
	if n := res.Container.Config.Labels[labelHolderNetwork]; n != "" {
		nets = append(nets, n)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		for name, ep := range ns.Networks {
			if ep != nil && ep.NetworkID != "" {
				nets = append(nets, ep.NetworkID)
			} else if name != "" && !slices.Contains(nets, name) {
				nets = append(nets, name)
			}
		}
	}
	if _, err := d.cli.ContainerRemove(ctx, res.Container.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove holder %s: %w", name, d.engineErr(err))
	}
	var errs []error
	for _, id := range nets {
		errs = append(errs, d.removeNetwork(ctx, id, id))
	}
	return errors.Join(errs...)
}

// collectNetworks removes holder networks no container uses any more that
// are older than a create takes (a holder removed without its network).
func (p *netPool) collectNetworks(ctx context.Context) {
	res, err := p.d.cli.NetworkList(ctx, client.NetworkListOptions{
		Filters: make(client.Filters).Add("label", labelHolder+"=true")})
	if err != nil {
		return
	}
	for _, nw := range res.Items {
		if time.Since(nw.Created) < 2*time.Minute {
			continue
		}
		ins, err := p.d.cli.NetworkInspect(ctx, nw.ID, client.NetworkInspectOptions{})
		if err != nil || len(ins.Network.Containers) > 0 {
			continue
		}
		p.d.removeNetwork(ctx, nw.ID, nw.Name)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
