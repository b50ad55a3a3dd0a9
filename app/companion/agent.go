package companion

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/agent/service"
	"github.com/berthdev/berth/providers/docker"
)

// DefaultDataDir is the lending agent's data folder, the same as berth
// agent run's: $BERTH_AGENT_DATA, $XDG_DATA_HOME/berth/agent, or
// ~/.local/share/berth/agent. Its control socket is agent.sock in it.
func DefaultDataDir() string {
	if v := os.Getenv("BERTH_AGENT_DATA"); v != "" {
		return v
	}
	if v := os.Getenv("XDG_DATA_HOME"); v != "" {
		return filepath.Join(v, "berth", "agent")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "berth", "agent")
	}
	return "berth-agent"
}

// runner runs the lending agent in the app's process (lender.RunAgent)
// while the machine is paired and no service runs it, and restarts it
// after a pairing or a failure.
type runner struct {
	dataDir string
	socket  string
	docker  docker.Options
	store   *credstore.Store
	version string
	log     *slog.Logger
	retry   time.Duration

	kick chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	paused  bool // a system service runs the agent instead
	cancel  context.CancelFunc
	running bool
	problem string
}

func newRunner(dataDir string, dopts docker.Options, store *credstore.Store, version string, log *slog.Logger) *runner {
	return &runner{
		dataDir: dataDir, socket: filepath.Join(dataDir, control.SocketName), docker: dopts,
		store: store, version: version, log: log.With("component", "companion-agent"),
		retry: 5 * time.Second, kick: make(chan struct{}, 1),
	}
}

// Start runs the loop until ctx ends; Wait waits for it.
func (r *runner) Start(ctx context.Context) {
	r.wg.Go(func() { r.loop(ctx) })
}

func (r *runner) Wait() { r.wg.Wait() }

// Restart stops the agent if it runs and starts it again with the stored
// credentials (after a pairing).
func (r *runner) Restart() {
	r.mu.Lock()
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Pause stops the agent and keeps it stopped until Resume (while a
// service runs it); it returns once the agent has let go of its socket,
// or after 15 s.
func (r *runner) Pause() {
	r.mu.Lock()
	r.paused = true
	r.mu.Unlock()
	r.Restart()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		r.mu.Lock()
		running := r.running
		r.mu.Unlock()
		if !running {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Resume lets the agent run again.
func (r *runner) Resume() {
	r.mu.Lock()
	r.paused = false
	r.mu.Unlock()
	r.Restart()
}

// Problem says why the agent is not running, or "".
func (r *runner) Problem() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.problem
}

func (r *runner) setProblem(p string) {
	r.mu.Lock()
	r.problem = p
	r.mu.Unlock()
}

func (r *runner) loop(ctx context.Context) {
	for ctx.Err() == nil {
		wait := r.retry
		if err := r.runOnce(ctx); err != nil {
			r.setProblem(err.Error())
			if errors.Is(err, errNotPaired) || errors.Is(err, errPaused) {
				wait = time.Hour // until a pairing or Resume kicks
			} else {
				r.log.Warn("agent stopped", "err", err)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-r.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

var (
	errNotPaired = errors.New("this machine is not paired yet: pair it with a supervisor in Settings")
	errPaused    = errors.New("the system service runs the agent")
)

func (r *runner) runOnce(ctx context.Context) error {
	r.mu.Lock()
	paused := r.paused
	r.mu.Unlock()
	if paused {
		return errPaused
	}
	creds, err := r.store.Load()
	if errors.Is(err, credstore.ErrNotFound) {
		return errNotPaired
	}
	if err != nil {
		return fmt.Errorf("read the pairing credentials: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.cancel, r.running = cancel, true
	r.mu.Unlock()
	defer func() {
		cancel()
		r.mu.Lock()
		r.cancel, r.running = nil, false
		r.mu.Unlock()
	}()
	err = lender.RunAgent(rctx, lender.AgentOptions{
		LenderID: creds.LenderID, Token: creds.Token, RelayURL: creds.RelayURL, SupervisorURL: creds.SupervisorURL,
		DataDir: r.dataDir, Socket: r.socket, Docker: r.docker, Logger: r.log, Version: r.version,
		Ready: func(*lender.Lender) {
			r.setProblem("")
			r.log.Info("agent running in the app", "agent", creds.LenderID, "socket", r.socket)
		},
	})
	if rctx.Err() != nil && ctx.Err() == nil {
		return nil // restarted on purpose
	}
	if err == nil && ctx.Err() == nil {
		err = errors.New("the agent stopped")
	}
	return err
}

// serviceCtl installs and removes `berth agent run` as a service: a user
// service for a user, a system service for root. While the service runs
// the agent, the app's own agent is paused; both use the same data folder
// and control socket, so the window does not notice the switch.
type serviceCtl struct {
	cfg    service.Config
	runner *runner // nil when the app attached to a running agent
	berth  string
}

func newServiceCtl(dataDir string, r *runner) *serviceCtl {
	berth := ""
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "berth"); isExecutable(p) {
			berth = p
		}
	}
	if berth == "" {
		if p, err := exec.LookPath("berth"); err == nil {
			berth, _ = filepath.Abs(p)
		}
	}
	return &serviceCtl{
		cfg:    service.Config{User: os.Geteuid() != 0, Executable: berth, Args: []string{"agent", "run", "--data", dataDir}},
		runner: r, berth: berth,
	}
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func (s *serviceCtl) open() (*service.Service, error) {
	if s.berth == "" {
		return nil, errors.New("the berth command is neither beside this app nor on PATH; install the berth package first")
	}
	return service.New(s.cfg)
}

// Installed implements ui.Service.
func (s *serviceCtl) Installed(context.Context) (bool, error) {
	svc, err := s.open()
	if err != nil {
		return false, err
	}
	st, err := svc.Status()
	if err != nil {
		return false, err
	}
	return st != service.StatusNotInstalled, nil
}

// Install implements ui.Service: the app's agent stops, the service
// starts.
func (s *serviceCtl) Install(context.Context) error {
	svc, err := s.open()
	if err != nil {
		return err
	}
	if s.runner != nil {
		s.runner.Pause()
	}
	if err := svc.Install(); err != nil {
		if s.runner != nil {
			s.runner.Resume()
		}
		return err
	}
	if err := svc.Start(); err != nil {
		return fmt.Errorf("installed as %s, but it did not start: %w", svc.Path(), err)
	}
	return nil
}

// Remove implements ui.Service: the service goes, the app's agent runs
// again.
func (s *serviceCtl) Remove(context.Context) error {
	svc, err := s.open()
	if err != nil {
		return err
	}
	if err := svc.Uninstall(); err != nil {
		return err
	}
	if s.runner != nil {
		s.runner.Resume()
	}
	return nil
}
