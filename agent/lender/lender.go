// Package lender is the core of the lending agent on a lender's machine: it
// runs computers for a supervisor through the same providers/docker code
// (and so the same hardening) as the docker provider, checks the owner's
// limits before every start, keeps a local ledger, adopts or offers to
// clean up what it finds after a restart, and serves the supervisor the
// computer API (create, destroy, list, and each computer's computerd) over
// the relay link. It is also the backend of the local control API
// (agent/control).
//
// A Lender is built from parts around one table of computers and its lock
// (core, computers.go): the lending protocol's server for the supervisor
// (supervisorAPI, handler.go), the owner's control API (ownerAPI,
// owner.go), the side of the agent's egress proxy (egressSide, egress.go),
// the warm pool (pool.go) and the TURN forwarder for live view
// (turnfwd.go).
package lender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/internal/clock"
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

// Lender runs computers on this machine for a supervisor. It composes
// the lender's parts around one table of running computers (core): the
// API the supervisor reaches over the relay link (supervisorAPI, the
// lending protocol), the owner's control API (ownerAPI, agent/control's
// Backend) and the agent's egress proxy side (egressSide).
type Lender struct {
	*core
	supervisorAPI
	ownerAPI
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
	l := &core{
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
	l.egress = &egressSide{e: cfg.Egress, log: l.log, admits: l.egressAdmits}
	return &Lender{core: l, supervisorAPI: supervisorAPI{l}, ownerAPI: ownerAPI{l}}, nil
}

// Close stops the lender's timers and releases Docker. Running computers
// keep running: a restarted agent adopts them.
func (l *core) Close() error {
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
