package lender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// core is what the lender's parts share: the computers it runs, starts
// and removes, the owner's settings they run under, the ledger, the
// Docker provider, the warm pool and the TURN forwarder, all under one
// lock.
type core struct {
	cfg        Config
	log        *slog.Logger
	clk        clock.Clock
	deployment string
	transport  http.RoundTripper
	done       chan struct{}
	wg         sync.WaitGroup
	egress     *egressSide

	mu        sync.Mutex
	closed    bool
	settings  control.Settings
	docker    Docker
	retired   []Docker   // instances for earlier sizes, closed with the lender
	sized     [2]float64 // the cpus and memoryMB docker was built for
	running   map[string]*computer
	ending    map[string]*computer // being removed; shown to the owner as stopping
	starting  map[string]reservation
	approvals map[string]*approval
	prompts   []*control.CleanupPrompt
	relay     control.RelayStatus
	pool      pool

	turn turnState // the TURN forwarder for lent desktops
}

// computer is a running computer.
type computer struct {
	s        ledger.Session
	endpoint string // computerd's base URL on the engine's network
	stop     chan struct{}

	mu    sync.Mutex
	token string // the supervisor's token for it, seen on a proxied call; memory only
	prev  cpuSample
	// removeFails counts the removals that failed in a row, removeErr is
	// the last one's error and retryAt when the agent tries again.
	removeFails int
	removeErr   string
	retryAt     time.Time
}

type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

type reservation struct {
	lease time.Duration
	day   string
}

type approval struct {
	info    control.Approval
	decided chan bool // buffered, receives the owner's decision once
}

// current returns a copy of the owner's settings.
func (l *core) current() control.Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.settings
	s.Hours.Days = slices.Clone(s.Hours.Days)
	return s
}

// provider returns the Docker provider for the current size, building it
// when the size changed.
func (l *core) provider() (Docker, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	size := [2]float64{l.settings.CPUs, float64(l.settings.MemoryMB)}
	if l.docker != nil && l.sized == size {
		d := l.docker
		l.mu.Unlock()
		return d, nil
	}
	d, err := l.cfg.Docker(l.settings.CPUs, l.settings.MemoryMB)
	if err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("docker: %w", err)
	}
	// Machines are removed by name, so the new instance removes those the
	// old one made too; the old one may still be in use by a start and is
	// closed with the lender.
	if l.docker != nil {
		l.retired = append(l.retired, l.docker)
	}
	l.docker, l.sized = d, size
	l.mu.Unlock()
	return d, nil
}

// start creates the container through the docker provider.
func (l *core) start(ctx context.Context, r lending.CreateRequest, day string, now time.Time, lease time.Duration) (*computer, error) {
	d, err := l.provider()
	if err != nil {
		return nil, errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "%v", err)
	}
	ls := ledger.Session{
		ComputerID: r.ComputerID, SessionID: r.SessionID, AttemptID: r.AttemptID, Agent: r.Agent,
		Workspace: r.Workspace, Image: r.Image, Deployment: r.Deployment, TokenHash: r.TokenHash,
		Day: day, StartedAt: now, ExpiresAt: now.Add(lease),
	}
	if err := l.cfg.Ledger.Begin(ctx, ls); err != nil {
		return nil, err
	}
	spec := providers.Spec{
		ComputerID: r.ComputerID, SessionID: r.SessionID, AttemptID: r.AttemptID,
		Deployment: l.deployment, AgentID: r.Agent, Image: r.Image, TokenHash: r.TokenHash,
		Env: l.egress.env(r.ComputerID, r.Env, l.current().Egress), Lease: lease,
	}
	spec.Env = l.liveViewEnv(ctx, r, spec.Env)
	m, err := d.Create(ctx, spec)
	if err != nil {
		if ferr := l.cfg.Ledger.Forget(context.WithoutCancel(ctx), r.ComputerID); ferr != nil {
			l.log.Warn("forget failed start", "computer", r.ComputerID, "err", ferr)
		}
		l.log.Warn("create failed", "computer", r.ComputerID, "err", err)
		return nil, createError(err)
	}
	ls.MachineID = m.ID
	if err := l.cfg.Ledger.SetMachine(context.WithoutCancel(ctx), r.ComputerID, m.ID); err != nil {
		l.log.Warn("ledger", "computer", r.ComputerID, "err", err)
	}
	l.log.Info("computer started", "computer", r.ComputerID, "agent", r.Agent, "workspace", r.Workspace,
		"image", r.Image, "expires", ls.ExpiresAt)
	return &computer{s: ls, endpoint: m.Endpoint, stop: make(chan struct{})}, nil
}

func createError(err error) error {
	switch {
	case errors.Is(err, providers.ErrBadImage):
		return errorf(http.StatusBadGateway, lending.CodeBadImage, "%v", err)
	case errors.Is(err, providers.ErrUnavailable):
		return errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "Docker on the lender's machine is unreachable")
	case errors.Is(err, providers.ErrCapacity):
		return errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "the lender's machine is out of capacity")
	}
	return errorf(http.StatusBadGateway, lending.CodeUnavailable, "the computer could not be created: %v", err)
}

// removeRetry spaces the agent's own attempts to remove a computer whose
// removal failed.
const removeRetry = time.Minute

// watch ends c at its expiry plus the grace, in case the supervisor does
// not. It runs with l.mu held.
func (l *core) watch(c *computer) { l.watchAfter(c, 0) }

// watchAfter is watch, waiting at least atLeast; it returns when it ends c.
func (l *core) watchAfter(c *computer, atLeast time.Duration) time.Time {
	now := l.clk.Now()
	wait := max(c.s.ExpiresAt.Add(l.cfg.ExpiryGrace).Sub(now), atLeast)
	timer := l.clk.After(wait)
	l.wg.Go(func() {
		select {
		case <-timer:
			l.log.Info("lease over and not stopped by the supervisor; removing the computer", "computer", c.s.ComputerID)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := l.end(ctx, c.s.ComputerID, "expired"); err != nil {
				l.log.Warn("remove expired computer", "computer", c.s.ComputerID, "err", err)
			}
		case <-c.stop:
		case <-l.done:
		}
	})
	return now.Add(wait)
}

// end removes a running computer and closes its ledger row.
func (l *core) end(ctx context.Context, computerID, reason string) error {
	l.mu.Lock()
	c := l.running[computerID]
	if c != nil {
		delete(l.running, computerID)
		l.ending[computerID] = c
		close(c.stop)
	}
	l.mu.Unlock()
	machine := docker.ContainerPrefix + computerID
	if c != nil && c.s.MachineID != "" {
		machine = c.s.MachineID
	}
	d, err := l.provider()
	if err == nil {
		err = d.Destroy(ctx, machine)
	}
	failed := err != nil && !errors.Is(err, providers.ErrNotFound)
	if c != nil {
		l.mu.Lock()
		if l.ending[computerID] == c {
			delete(l.ending, computerID)
		}
		// On a failed removal keep it, watched again, so that a retry finds it.
		if failed && !l.closed && l.running[computerID] == nil {
			c.stop = make(chan struct{})
			l.running[computerID] = c
			next := l.watchAfter(c, removeRetry)
			c.mu.Lock()
			c.removeFails++
			c.removeErr, c.retryAt = err.Error(), next
			fails := c.removeFails
			c.mu.Unlock()
			if fails == control.CleanupFailedAfter {
				l.log.Error("computer cannot be removed; the owner is told", "computer", computerID, "attempts", fails, "err", err)
			}
		}
		l.mu.Unlock()
	}
	if errors.Is(err, ErrClosed) {
		return err
	}
	if failed {
		return errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "remove computer %s: %v", computerID, err)
	}
	end := l.clk.Now()
	if ended, err := l.cfg.Ledger.End(context.WithoutCancel(ctx), computerID, end, reason); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		l.log.Warn("ledger", "computer", computerID, "err", err)
	} else if ended {
		l.log.Info("computer ended", "computer", computerID, "reason", reason)
	}
	return nil
}

// Computers lists the running computers.
func (l *core) Computers() []lending.Computer {
	l.mu.Lock()
	cs := make([]*computer, 0, len(l.running))
	for _, c := range l.running {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	out := make([]lending.Computer, 0, len(cs))
	for _, c := range cs {
		out = append(out, l.view(c))
	}
	sortComputers(out)
	return out
}

func sortComputers(cs []lending.Computer) {
	slices.SortFunc(cs, func(a, b lending.Computer) int { return strings.Compare(a.ComputerID, b.ComputerID) })
}

func (l *core) view(c *computer) lending.Computer {
	return lending.Computer{
		ComputerID: c.s.ComputerID,
		MachineID:  c.s.MachineID,
		Labels: map[string]string{
			providers.LabelManaged:    "true",
			providers.LabelComputer:   c.s.ComputerID,
			providers.LabelSession:    c.s.SessionID,
			providers.LabelAttempt:    c.s.AttemptID,
			providers.LabelAgent:      c.s.Agent,
			providers.LabelDeployment: c.s.Deployment,
		},
		Started: c.s.StartedAt,
		Expires: c.s.ExpiresAt,
	}
}

// computerOf returns the computer id of a running computer named by its
// computer id or by its container's name without the prefix (a computer
// from the warm pool has a container named after its pool id).
func (l *core) computerOf(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[id] != nil {
		return id
	}
	for cid, c := range l.running {
		if c.s.MachineID == docker.ContainerPrefix+id {
			return cid
		}
	}
	return id
}

// lookup returns a running computer.
func (l *core) lookup(id string) (*computer, error) {
	id = l.computerOf(strings.TrimPrefix(id, docker.ContainerPrefix))
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.running[id]
	if c == nil {
		return nil, errorf(http.StatusNotFound, lending.CodeNotFound, "computer %q does not run on this machine", id)
	}
	return c, nil
}
