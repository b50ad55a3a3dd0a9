// Package lender is the core of the lending agent on a lender's machine: it
// runs computers for a supervisor through the same providers/docker code
// (and so the same hardening) as the docker provider, checks the owner's
// limits before every start, keeps a local ledger, adopts or offers to
// clean up what it finds after a restart, and serves the supervisor the
// computer API (create, destroy, list, and each computer's computerd) over
// the relay link. It is also the backend of the local control API
// (agent/control).
package lender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
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

// Provider is the ID the supervisor's provider for lent machines goes by,
// reported in every session.
const Provider = "local"

// DefaultExpiryGrace is how long past its lease a computer is left for the
// supervisor to stop before the agent removes it itself.
const DefaultExpiryGrace = 30 * time.Second

// Docker is what computers run through: the docker provider, sized by the
// owner's CPU and memory limits.
type Docker interface {
	providers.Provider
	providers.Lister
	Stats(ctx context.Context, machineID string) (docker.Stats, error)
	Close() error
}

// DockerFactory builds the Docker provider for computers of the given size.
// The lender builds a new one when the owner changes the size.
type DockerFactory func(cpus float64, memoryMB int64) (Docker, error)

// Config configures a Lender.
type Config struct {
	// LenderID is this lending daemon's own id at the supervisor (its
	// companion id from pairing). Every machine the lender makes carries it
	// (see Deployment), so that two agents on one Docker engine never take
	// each other's computers for leftovers.
	LenderID string
	// DataDir holds the settings file. Required.
	DataDir string
	// Docker builds the provider computers run through. Required.
	Docker DockerFactory
	// Engine lists and removes leftovers by kind. Required.
	Engine Engine
	// Ledger records sessions. Required.
	Ledger *ledger.Ledger
	// Clock drives expiry, budgets, allowed hours and approval timeouts;
	// nil is the system clock.
	Clock clock.Clock
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
	// Version is reported in the state and status.
	Version string
	// Transport reaches the computers' computerd; nil uses a default one.
	Transport http.RoundTripper
	// ExpiryGrace; zero is DefaultExpiryGrace.
	ExpiryGrace time.Duration
	// Pairing and RelayURL are reported in the status.
	Pairing  control.Pairing
	RelayURL string
	// Egress is the agent's egress proxy; nil gives computers no proxy
	// (they then have no way out).
	Egress *Egress
	// OpenTURN, when set, opens the TURN forwarder's port (one the agent
	// picks) to computers in the host firewall before a desktop computer
	// starts (docker.OpenTURN). CloseTURN closes it when the lender closes
	// (docker.UnguardTURN).
	OpenTURN func(ctx context.Context, port int) error
	// TURNRelay is the TURN relay live view of lent desktops goes to,
	// host:port, as the owner configured it (berth agent run --turn-relay).
	// Empty: the paired supervisor's host, at the port the supervisor names,
	// when that host is a public address (liveview.go).
	TURNRelay string
	// TURNForwardHost is where the forwarder listens; empty is the docker0
	// address.
	TURNForwardHost string
	CloseTURN       func(ctx context.Context, port int) error
}

// Lender runs computers on this machine for a supervisor.
type Lender struct {
	cfg        Config
	log        *slog.Logger
	clk        clock.Clock
	deployment string
	transport  http.RoundTripper
	done       chan struct{}
	wg         sync.WaitGroup

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

// Deployment returns the deployment label of the machines an agent makes.
func Deployment(lenderID string) string { return "lender-" + lenderID }

// New returns a Lender with the owner's settings from the data folder. It
// does not touch Docker; Start does.
func New(cfg Config) (*Lender, error) {
	if cfg.LenderID == "" || cfg.DataDir == "" || cfg.Docker == nil || cfg.Engine == nil || cfg.Ledger == nil {
		return nil, errors.New("lender: LenderID, DataDir, Docker, Engine and Ledger are required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("lender: data folder: %w", err)
	}
	s, err := loadSettings(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	l := &Lender{
		cfg:        cfg,
		log:        cfg.Logger,
		clk:        cfg.Clock,
		deployment: Deployment(cfg.LenderID),
		transport:  cfg.Transport,
		done:       make(chan struct{}),
		settings:   s,
		running:    map[string]*computer{},
		ending:     map[string]*computer{},
		starting:   map[string]reservation{},
		approvals:  map[string]*approval{},
		relay:      control.RelayStatus{URL: cfg.RelayURL},
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.log = l.log.With("component", "lender")
	if l.clk == nil {
		l.clk = clock.Real{}
	}
	l.pool.Pool = l.newPool()
	if l.cfg.ExpiryGrace <= 0 {
		l.cfg.ExpiryGrace = DefaultExpiryGrace
	}
	if l.transport == nil {
		l.transport = &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	}
	return l, nil
}

// Close stops the lender's timers and releases Docker. Running computers
// keep running: a restarted agent adopts them.
func (l *Lender) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	l.wg.Wait() // pool creates in flight remove what they made
	l.drainPool("the agent is shutting down")
	l.closeTURNForward()
	l.mu.Lock()
	ds := append(l.retired, l.docker)
	l.docker, l.retired = nil, nil
	l.mu.Unlock()
	if t, ok := l.transport.(*http.Transport); ok && l.cfg.Transport == nil {
		t.CloseIdleConnections()
	}
	var errs []error
	for _, d := range ds {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(errs...)
}

// provider returns the Docker provider for the current size, building it
// when the size changed.
func (l *Lender) provider() (Docker, error) {
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

var (
	idRE        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	tokenHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func checkCreate(r *lending.CreateRequest) error {
	switch {
	case !idRE.MatchString(r.ComputerID):
		return badRequest("computerId: %q must be 1 to 128 letters, digits, '_', '.' or '-'", r.ComputerID)
	case !tokenHashRE.MatchString(r.TokenHash):
		return badRequest("tokenHash: want the hex SHA-256 of the computer's token (64 lowercase hex digits)")
	case r.LeaseSeconds < 60 || r.LeaseSeconds > MaxDailySeconds:
		return badRequest("leaseSeconds: %d is outside 60..%d", r.LeaseSeconds, MaxDailySeconds)
	case r.CPUs < 0 || r.MemoryMB < 0:
		return badRequest("cpus and memoryMB: must not be negative")
	case len(r.Agent) > 128 || len(r.Workspace) > 128 || len(r.SessionID) > 128 || len(r.AttemptID) > 128 || len(r.Deployment) > 128:
		return badRequest("agent, workspace, sessionId, attemptId and deployment: at most 128 characters each")
	}
	switch r.Image {
	case "":
		r.Image = providers.ImageHeadless
	case providers.ImageHeadless, providers.ImageDesktop:
	default:
		return badRequest("image: %q must be %q or %q", r.Image, providers.ImageHeadless, providers.ImageDesktop)
	}
	return nil
}

// Create starts a computer, after checking the owner's limits and, in
// approval mode, waiting for the owner. A retry of the same attempt
// returns the computer it made.
func (l *Lender) Create(ctx context.Context, r lending.CreateRequest) (lending.Computer, error) {
	if err := checkCreate(&r); err != nil {
		return lending.Computer{}, err
	}
	lease := time.Duration(r.LeaseSeconds) * time.Second
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return lending.Computer{}, ErrClosed
	}
	if c := l.running[r.ComputerID]; c != nil {
		l.mu.Unlock()
		if c.s.AttemptID == r.AttemptID {
			return l.view(c), nil
		}
		return lending.Computer{}, errorf(http.StatusConflict, lending.CodeConflict, "computer %s already runs here (attempt %s)", r.ComputerID, c.s.AttemptID)
	}
	if _, ok := l.starting[r.ComputerID]; ok {
		l.mu.Unlock()
		return lending.Computer{}, errorf(http.StatusConflict, lending.CodeConflict, "computer %s is already starting", r.ComputerID)
	}
	now := l.clk.Now()
	s := l.settings
	day, err := l.checkLimits(ctx, r, s, now)
	if err != nil {
		l.mu.Unlock()
		l.log.Info("start refused", "computer", r.ComputerID, "agent", r.Agent, "workspace", r.Workspace, "reason", err)
		return lending.Computer{}, err
	}
	l.starting[r.ComputerID] = reservation{lease: lease, day: day}
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		delete(l.starting, r.ComputerID)
		l.mu.Unlock()
	}

	if s.Approval {
		if err := l.await(ctx, r, time.Duration(s.ApprovalTimeoutSeconds)*time.Second); err != nil {
			release()
			l.log.Info("start refused", "computer", r.ComputerID, "agent", r.Agent, "reason", err)
			return lending.Computer{}, err
		}
		now = l.clk.Now()
	}
	c, err := l.launch(ctx, r, day, now, lease)
	if err != nil {
		release()
		return lending.Computer{}, err
	}
	l.mu.Lock()
	delete(l.starting, r.ComputerID)
	if l.closed {
		l.mu.Unlock()
		return l.view(c), nil
	}
	l.running[r.ComputerID] = c
	l.watch(c)
	l.mu.Unlock()
	return l.view(c), nil
}

// start creates the container through the docker provider.
func (l *Lender) start(ctx context.Context, r lending.CreateRequest, day string, now time.Time, lease time.Duration) (*computer, error) {
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
		Env: l.computerEnv(r.ComputerID, r.Env, l.Settings().Egress), Lease: lease,
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

// checkLimits refuses a start that breaks one of the owner's limits, each
// with its own code. It runs with l.mu held and returns the owner's local
// day the session counts on.
func (l *Lender) checkLimits(ctx context.Context, r lending.CreateRequest, s control.Settings, now time.Time) (string, error) {
	loc, err := location(s.TimeZone)
	if err != nil {
		loc = time.Local
	}
	local := now.In(loc)
	day := local.Format(time.DateOnly)
	if !s.Lending {
		return "", errorf(http.StatusServiceUnavailable, lending.CodePaused, "lending is paused by the machine's owner")
	}
	if !allowedAt(s.Hours, local) {
		days := "every day"
		if len(s.Hours.Days) > 0 {
			days = strings.Join(s.Hours.Days, ", ")
		}
		return "", limitf(lending.CodeHours, "the owner lends this machine from %s to %s (%s, %s); it is %s there now",
			s.Hours.From, s.Hours.To, days, loc, local.Format("Mon 15:04"))
	}
	if r.Image == providers.ImageDesktop && !s.Desktop {
		return "", limitf(lending.CodeDesktop, "the owner allows no desktop computers on this machine; ask for the headless image")
	}
	if r.CPUs > s.CPUs {
		return "", limitf(lending.CodeCPU, "cpus: %g asked, the owner allows at most %g per computer", r.CPUs, s.CPUs)
	}
	if r.MemoryMB > s.MemoryMB {
		return "", limitf(lending.CodeMemory, "memoryMB: %d asked, the owner allows at most %d MB per computer", r.MemoryMB, s.MemoryMB)
	}
	if n := len(l.running) + len(l.starting); n >= s.MaxComputers {
		return "", limitf(lending.CodeTooMany, "the owner allows at most %d computers at once on this machine; %d are running or starting", s.MaxComputers, n)
	}
	used, err := l.cfg.Ledger.DaySeconds(ctx, day, now)
	if err != nil {
		return "", err
	}
	var reserved int64
	for _, c := range l.running {
		if c.s.Day == day && c.s.ExpiresAt.After(now) {
			reserved += int64(c.s.ExpiresAt.Sub(now).Seconds())
		}
	}
	for _, p := range l.starting {
		if p.day == day {
			reserved += int64(p.lease.Seconds())
		}
	}
	if left := s.DailySeconds - used - reserved; left < int64(r.LeaseSeconds) {
		return "", limitf(lending.CodeBudget, "daily lending budget: %d s of %d s left today (%s), this session needs %d s; it resets at midnight %s",
			max(left, 0), s.DailySeconds, day, r.LeaseSeconds, loc)
	}
	return day, nil
}

// await waits for the owner to approve the start, refusing it on a denial
// or once timeout has passed.
func (l *Lender) await(ctx context.Context, r lending.CreateRequest, timeout time.Duration) error {
	now := l.clk.Now()
	a := &approval{
		info: control.Approval{
			ID: "ap_" + r.ComputerID, Agent: r.Agent, Workspace: r.Workspace, Image: r.Image,
			Requested: now, Deadline: now.Add(timeout), State: control.ApprovalPending,
		},
		decided: make(chan bool, 1),
	}
	expired := l.clk.After(timeout) // before the approval shows, so a moved clock always finds it
	l.mu.Lock()
	l.approvals[a.info.ID] = a
	l.mu.Unlock()
	l.log.Info("session waits for the owner's approval", "approval", a.info.ID, "agent", r.Agent, "deadline", a.info.Deadline)
	var reason error
	select {
	case ok := <-a.decided:
		if ok {
			return nil
		}
		return errorf(http.StatusForbidden, lending.CodeDenied, "the machine's owner denied the session")
	case <-expired:
		reason = errorf(http.StatusServiceUnavailable, lending.CodeApprovalTimeout, "the machine's owner did not approve the session within %d s", int(timeout.Seconds()))
	case <-ctx.Done():
		reason = errorf(http.StatusServiceUnavailable, lending.CodeApprovalTimeout, "the request ended while waiting for the owner's approval")
	case <-l.done:
		reason = ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.info.State != control.ApprovalPending { // decided at the last moment
		if <-a.decided {
			return nil
		}
		return errorf(http.StatusForbidden, lending.CodeDenied, "the machine's owner denied the session")
	}
	a.info.State = control.ApprovalTimedOut
	delete(l.approvals, a.info.ID)
	return reason
}

// Decide approves or denies a waiting session.
func (l *Lender) Decide(id string, approve bool) (control.Approval, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.approvals[id]
	if a == nil || a.info.State != control.ApprovalPending {
		return control.Approval{}, errorf(http.StatusNotFound, lending.CodeNotFound, "no session waits for approval %q", id)
	}
	a.info.State = control.ApprovalDenied
	if approve {
		a.info.State = control.ApprovalApproved
	}
	a.decided <- approve
	delete(l.approvals, id)
	l.log.Info("owner decided", "approval", id, "state", a.info.State)
	return a.info, nil
}

// removeRetry spaces the agent's own attempts to remove a computer whose
// removal failed.
const removeRetry = time.Minute

// watch ends c at its expiry plus the grace, in case the supervisor does
// not. It runs with l.mu held.
func (l *Lender) watch(c *computer) { l.watchAfter(c, 0) }

// watchAfter is watch, waiting at least atLeast; it returns when it ends c.
func (l *Lender) watchAfter(c *computer, atLeast time.Duration) time.Time {
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
func (l *Lender) end(ctx context.Context, computerID, reason string) error {
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

// Destroy removes a computer by its computer id or machine id. A computer
// that is gone is not an error.
func (l *Lender) Destroy(ctx context.Context, id string) error {
	id = strings.TrimPrefix(id, docker.ContainerPrefix)
	if !idRE.MatchString(id) {
		return badRequest("id: %q is not a computer id", id)
	}
	return l.end(ctx, l.computerOf(id), "stopped")
}

// Computers lists the running computers.
func (l *Lender) Computers() []lending.Computer {
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

func (l *Lender) view(c *computer) lending.Computer {
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

// State returns what the lender runs.
func (l *Lender) State() lending.State {
	l.mu.Lock()
	on := l.settings.Lending
	l.mu.Unlock()
	return lending.State{AgentID: l.cfg.LenderID, Version: l.cfg.Version, Lending: on, Computers: l.Computers()}
}

// computerOf returns the computer id of a running computer named by its
// computer id or by its container's name without the prefix (a computer
// from the warm pool has a container named after its pool id).
func (l *Lender) computerOf(id string) string {
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
func (l *Lender) lookup(id string) (*computer, error) {
	id = l.computerOf(strings.TrimPrefix(id, docker.ContainerPrefix))
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.running[id]
	if c == nil {
		return nil, errorf(http.StatusNotFound, lending.CodeNotFound, "computer %q does not run on this machine", id)
	}
	return c, nil
}
