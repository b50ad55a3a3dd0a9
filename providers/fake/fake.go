// Package fake is a scripted provider for tests and demos. Its machines are
// real computerd servers running in-process on loopback, each with its own
// home folder, so every tool call does real work. Faults can be injected:
// lost create replies, slow creates, failing destroys and machines that die.
package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/server"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
)

// ID is the fake provider's registry id.
const ID = "fake"

// Faults script what the next calls do. Counters count down as they are used.
type Faults struct {
	// LoseCreateReplies makes the next n creates make the machine, then
	// answer an error as if the reply was lost.
	LoseCreateReplies int
	// FailCreates makes the next n creates fail before making anything,
	// with CreateErr (default providers.ErrUnavailable).
	FailCreates int
	CreateErr   error
	// CreateDelay delays every create.
	CreateDelay time.Duration
	// CreateGate, when set, holds every create (after CreateDelay) until
	// it is closed, so that a test decides when a create goes on.
	CreateGate <-chan struct{}
	// FailDestroys makes the next n destroys fail.
	FailDestroys int
	// DestroyGate, when set, holds every destroy until it is closed, as an
	// engine that is slow to remove a container does.
	DestroyGate <-chan struct{}
	// FailLists makes the next n lists fail with providers.ErrUnavailable.
	FailLists int
	// FailResumes makes the next n resumes fail with providers.ErrNotFound,
	// as if the suspended machine had been removed.
	FailResumes int
}

// Provider is the fake provider.
type Provider struct {
	dir string
	log *slog.Logger

	// instant makes machines answer exec at once without running anything.
	instant bool
	// desktop, when set, is the desktop machines serve (server.Config.Desktop).
	desktop http.Handler

	mu     sync.Mutex
	faults Faults
	// suspendable lets machines be suspended (providers.Suspender).
	suspendable bool
	machines    map[string]*machine
	creates     int
	destroys    int
	suspends    int
	resumes     int
}

type machine struct {
	m    providers.Machine
	h    http.Handler
	srv  *http.Server
	ln   net.Listener
	home string
	// suspended: srv is closed; Resume serves h again.
	suspended bool
}

// New returns a fake provider whose machines keep their homes under dir.
func New(dir string, log *slog.Logger) *Provider {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{dir: dir, log: log, machines: map[string]*machine{}}
}

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		dir := cfg.Get("FAKE_PROVIDER_DIR", "")
		if dir == "" {
			d, err := os.MkdirTemp("", "berth-fake-")
			if err != nil {
				return nil, err
			}
			dir = d
		}
		return New(dir, cfg.Logger), nil
	})
}

// SetInstantExec makes machines created from now on answer every exec at
// once with exit code 0 and the command as stdout, running nothing. It
// isolates the supervisor's own cost in benchmarks.
func (p *Provider) SetInstantExec(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instant = on
}

// SetDesktop makes machines created from now on serve h as their desktop
// (under /v1/desktop and /v1/screenshot, as computerd does with a screen);
// nil serves none.
func (p *Provider) SetDesktop(h http.Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.desktop = h
}

// SetFaults replaces the scripted faults.
func (p *Provider) SetFaults(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// UpdateFaults changes the scripted faults in place, keeping the counters
// that f leaves alone.
func (p *Provider) UpdateFaults(f func(*Faults)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.faults)
}

// Counts returns how many creates and destroys were called.
func (p *Provider) Counts() (creates, destroys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.creates, p.destroys
}

// Create implements providers.Provider.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	p.mu.Lock()
	p.creates++
	f := &p.faults
	delay, gate := f.CreateDelay, f.CreateGate
	var failErr error
	if f.FailCreates > 0 {
		f.FailCreates--
		failErr = f.CreateErr
		if failErr == nil {
			failErr = providers.ErrUnavailable
		}
	}
	instant, desk := p.instant, p.desktop
	lose := false
	if failErr == nil && f.LoseCreateReplies > 0 {
		f.LoseCreateReplies--
		lose = true
	}
	p.mu.Unlock()

	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return providers.Machine{}, ctx.Err()
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return providers.Machine{}, ctx.Err()
		}
	}
	if failErr != nil {
		return providers.Machine{}, fmt.Errorf("fake create: %w", failErr)
	}
	id := "fake-" + spec.ComputerID
	home := filepath.Join(p.dir, id)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return providers.Machine{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return providers.Machine{}, err
	}
	var h http.Handler = server.New(server.Config{TokenHash: spec.TokenHash, Home: home, Logger: p.log.With("machine", id), Version: "fake", Env: spec.Env, Desktop: desk})
	if instant {
		h = instantExec{next: h, tokenHash: spec.TokenHash}
	}
	srv := serve(h, ln)
	m := providers.Machine{ID: id, Endpoint: "http://" + ln.Addr().String(), Labels: spec.Labels()}
	p.mu.Lock()
	p.machines[id] = &machine{m: m, h: h, srv: srv, ln: ln, home: home}
	p.mu.Unlock()
	if lose {
		return providers.Machine{}, errors.New("fake create: connection reset before the reply")
	}
	return m, nil
}

func serve(h http.Handler, ln net.Listener) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv
}

// SetSuspendable lets machines be suspended and resumed (persistence
// "memory"); without it CanSuspend refuses.
func (p *Provider) SetSuspendable(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.suspendable = on
}

// CanSuspend implements providers.Suspender.
func (p *Provider) CanSuspend(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.suspendable {
		return errors.New("the fake provider suspends machines only when its test turns it on")
	}
	return nil
}

// Suspend implements providers.Suspender: the machine's daemon stops
// answering, and keeps what it holds in memory for Resume.
func (p *Provider) Suspend(ctx context.Context, machineID string) error {
	if err := p.CanSuspend(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	mc := p.machines[machineID]
	if mc == nil {
		p.mu.Unlock()
		return fmt.Errorf("fake suspend %s: %w", machineID, providers.ErrNotFound)
	}
	already := mc.suspended
	mc.suspended = true
	p.suspends++
	p.mu.Unlock()
	if !already {
		mc.srv.Close()
	}
	return nil
}

// Resume implements providers.Suspender: the same daemon answers again,
// at a new address.
func (p *Provider) Resume(ctx context.Context, machineID string) (providers.Machine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	mc := p.machines[machineID]
	if p.faults.FailResumes > 0 {
		p.faults.FailResumes--
		mc = nil
	}
	if mc == nil || !mc.suspended {
		return providers.Machine{}, fmt.Errorf("fake resume %s: %w: not suspended", machineID, providers.ErrNotFound)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return providers.Machine{}, err
	}
	mc.ln, mc.srv, mc.suspended = ln, serve(mc.h, ln), false
	mc.m.Endpoint = "http://" + ln.Addr().String()
	p.resumes++
	return mc.m, nil
}

// Suspended counts the suspends and resumes called.
func (p *Provider) Suspended() (suspends, resumes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.suspends, p.resumes
}

// Destroy implements providers.Provider.
func (p *Provider) Destroy(ctx context.Context, machineID string) error {
	p.mu.Lock()
	p.destroys++
	if gate := p.faults.DestroyGate; gate != nil {
		p.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	if p.faults.FailDestroys > 0 {
		p.faults.FailDestroys--
		p.mu.Unlock()
		return fmt.Errorf("fake destroy %s: %w", machineID, providers.ErrUnavailable)
	}
	mc := p.machines[machineID]
	delete(p.machines, machineID)
	p.mu.Unlock()
	if mc == nil {
		return nil
	}
	mc.srv.Close()
	return os.RemoveAll(mc.home)
}

// Kill makes a machine die as if its host crashed: its daemon stops
// answering and in-flight calls lose their connection. The machine stays
// listed until destroyed.
func (p *Provider) Kill(machineID string) {
	p.mu.Lock()
	mc := p.machines[machineID]
	p.mu.Unlock()
	if mc != nil {
		mc.srv.Close()
	}
}

// List implements providers.Lister.
func (p *Provider) List(ctx context.Context) ([]providers.Machine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.faults.FailLists > 0 {
		p.faults.FailLists--
		return nil, fmt.Errorf("fake: list: %w", providers.ErrUnavailable)
	}
	out := make([]providers.Machine, 0, len(p.machines))
	for _, mc := range p.machines {
		out = append(out, mc.m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Home returns the home folder of a machine, for tests that check files.
func (p *Provider) Home(machineID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mc := p.machines[machineID]; mc != nil {
		return mc.home
	}
	return ""
}

// Close destroys every machine, whatever faults are still scripted.
func (p *Provider) Close() {
	p.SetFaults(Faults{})
	ms, _ := p.List(context.Background())
	for _, m := range ms {
		p.Destroy(context.Background(), m.ID)
	}
}

// instantExec answers exec requests itself and passes the rest on.
type instantExec struct {
	next      http.Handler
	tokenHash string
}

func (h instantExec) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/exec" {
		h.next.ServeHTTP(w, r)
		return
	}
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !token.Check(tok, h.tokenHash) {
		http.Error(w, `{"error":{"code":"unauthorized","message":"wrong token"}}`, http.StatusUnauthorized)
		return
	}
	var req computerd.ExecRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"code":"bad_request","message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(computerd.ExecResult{Stdout: req.Command, StdoutBytes: int64(len(req.Command))})
}

var (
	_ providers.Provider = (*Provider)(nil)
	_ providers.Lister   = (*Provider)(nil)
)
