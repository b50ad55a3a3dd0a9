package lender

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// Report says what Start found on the engine.
type Report struct {
	Adopted  int // running computers of open sessions, kept
	Cleaned  int // computers of ended or expired sessions, removed
	Vanished int // open sessions whose computer was gone, closed
	Prompts  int // leftovers the owner is asked about
	Pool     int // computers an earlier run left waiting in its warm pool, removed
}

// Start matches what this agent finds on the Docker engine (by its own
// deployment label, so never another agent's) to its ledger: the running
// computer of an open session is adopted and watched again; the remains of
// an ended or expired session are removed; an open session whose computer
// is gone is closed; anything the ledger does not know is listed as a
// cleanup prompt for the owner, kind by kind. Call it once before serving.
func (l *core) Start(ctx context.Context) (Report, error) {
	var rep Report
	d, err := l.provider()
	if err != nil {
		return rep, err
	}
	res, err := l.cfg.Engine.Resources(ctx, l.deployment)
	if err != nil {
		return rep, fmt.Errorf("find leftovers: %w", err)
	}
	ms, err := d.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("find computers: %w", err)
	}
	endpoints := map[string]string{} // computer id → computerd URL, running containers only
	for _, m := range ms {
		if m.Labels[providers.LabelDeployment] == l.deployment && m.Endpoint != "" {
			endpoints[m.Labels[providers.LabelComputer]] = m.Endpoint
		}
	}
	byComputer := map[string][]Resource{}
	var ids []string
	for _, r := range res {
		id := r.Labels[providers.LabelComputer]
		if _, ok := byComputer[id]; !ok {
			ids = append(ids, id)
		}
		byComputer[id] = append(byComputer[id], r)
	}
	slices.Sort(ids)
	open, err := l.cfg.Ledger.OpenSessions(ctx)
	if err != nil {
		return rep, err
	}
	// A computer claimed from a warm pool carries its pool id, not the
	// session's computer id: its session names it by its container.
	byMachine := map[string]ledger.Session{}
	for _, s := range open {
		if s.MachineID != "" {
			byMachine[s.MachineID] = s
		}
	}
	now := l.clk.Now()
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
		var s ledger.Session
		var err error
		if isPooled(byComputer[id]) {
			var ok bool
			if s, ok = byMachine[docker.ContainerPrefix+id]; !ok {
				// Left waiting by an earlier run: its bind secret is gone.
				if err := d.Destroy(ctx, docker.ContainerPrefix+id); err != nil {
					l.log.Warn("remove a computer left in the warm pool", "pooled", id, "err", err)
					for _, r := range byComputer[id] {
						if l.prompt(ctx, r, "left in the warm pool and could not be removed: "+err.Error()) {
							rep.Prompts++
						}
					}
					continue
				}
				l.log.Info("removed a computer left waiting in the warm pool", "pooled", id)
				rep.Pool++
				continue
			}
			seen[s.ComputerID] = true
		} else {
			s, err = l.cfg.Ledger.Get(ctx, id)
		}
		switch {
		case errors.Is(err, ledger.ErrNotFound) || id == "":
			for _, r := range byComputer[id] {
				if l.prompt(ctx, r, "not in this agent's ledger: it may be from a lost ledger or a start cut short") {
					rep.Prompts++
				}
			}
		case err != nil:
			return rep, err
		case s.Open() && endpoints[id] != "" && now.Before(s.ExpiresAt):
			l.adopt(s, endpoints[id])
			rep.Adopted++
		default:
			reason := "ended"
			switch {
			case s.Open() && !now.Before(s.ExpiresAt):
				reason = "expired while the agent was down"
			case s.Open():
				reason = "computer stopped while the agent was down"
			}
			if err := d.Destroy(ctx, docker.ContainerPrefix+id); err != nil {
				l.log.Warn("remove leftover computer", "computer", s.ComputerID, "err", err)
				for _, r := range byComputer[id] {
					if l.prompt(ctx, r, "could not be removed: "+err.Error()) {
						rep.Prompts++
					}
				}
				continue
			}
			if s.Open() {
				l.cfg.Ledger.End(ctx, s.ComputerID, earlier(now, s.ExpiresAt), reason)
			}
			l.log.Info("removed leftover computer", "computer", s.ComputerID, "reason", reason)
			rep.Cleaned++
		}
	}
	for _, s := range open {
		if seen[s.ComputerID] {
			continue
		}
		l.mu.Lock()
		_, running := l.running[s.ComputerID]
		_, starting := l.starting[s.ComputerID]
		l.mu.Unlock()
		if running || starting {
			continue
		}
		l.cfg.Ledger.End(ctx, s.ComputerID, earlier(now, s.ExpiresAt), "computer gone")
		rep.Vanished++
	}
	l.log.Info("matched the engine to the ledger", "adopted", rep.Adopted, "cleaned", rep.Cleaned, "vanished", rep.Vanished,
		"prompts", rep.Prompts, "pool", rep.Pool)
	l.mu.Lock()
	if !l.closed && !l.pool.running {
		l.pool.running = true
		l.wg.Go(l.runPool)
	}
	l.mu.Unlock()
	return rep, nil
}

// isPooled reports whether rs are a warm-pool computer's.
func isPooled(rs []Resource) bool {
	for _, r := range rs {
		if r.Labels[providers.LabelPool] == "true" {
			return true
		}
	}
	return false
}

func (l *core) adopt(s ledger.Session, endpoint string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.running[s.ComputerID] != nil {
		return
	}
	c := &computer{s: s, endpoint: endpoint, stop: make(chan struct{})}
	l.running[s.ComputerID] = c
	l.watch(c)
	l.log.Info("adopted running computer", "computer", s.ComputerID, "agent", s.Agent, "expires", s.ExpiresAt)
}

// prompt adds a cleanup prompt for r unless the owner kept it or it is
// already listed; it reports whether it added one.
func (l *core) prompt(ctx context.Context, r Resource, reason string) bool {
	if kept, err := l.cfg.Ledger.Kept(ctx, r.Kind, r.Name); err != nil || kept {
		return false
	}
	h := sha256.Sum256([]byte(r.Kind + "\x00" + r.Name))
	p := &control.CleanupPrompt{
		ID: "lo_" + hex.EncodeToString(h[:6]), Kind: r.Kind, Name: r.Name,
		Computer: r.Labels[providers.LabelComputer], Session: r.Labels[providers.LabelSession],
		Agent: r.Labels[providers.LabelAgent], Reason: reason, Found: l.clk.Now(), State: control.CleanupOpen,
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range l.prompts {
		if q.ID == p.ID {
			return false
		}
	}
	l.prompts = append(l.prompts, p)
	l.log.Warn("leftover needs the owner's decision", "prompt", p.ID, "kind", p.Kind, "name", p.Name, "reason", reason)
	return true
}

// Resync checks the running computers against the engine, after the relay
// link came back: computers that went away meanwhile are closed in the
// ledger, so that the supervisor's next list is true.
func (l *core) Resync(ctx context.Context) error {
	d, err := l.provider()
	if err != nil {
		return err
	}
	ms, err := d.List(ctx)
	if err != nil {
		return err
	}
	alive := map[string]bool{}
	for _, m := range ms {
		if m.Labels[providers.LabelDeployment] == l.deployment && m.Endpoint != "" {
			alive[m.Labels[providers.LabelComputer]] = true
			alive[m.ID] = true
		}
	}
	for _, c := range l.Computers() {
		if !alive[c.ComputerID] && (c.MachineID == "" || !alive[c.MachineID]) {
			l.log.Warn("computer gone while the relay was away", "computer", c.ComputerID)
			if err := l.end(ctx, c.ComputerID, "computer gone"); err != nil {
				l.log.Warn("close vanished computer", "computer", c.ComputerID, "err", err)
			}
		}
	}
	return nil
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
