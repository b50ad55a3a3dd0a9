package lender

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
)

// ownerAPI is what the owner sees and changes through agent/control (its
// Backend): settings, approvals, sessions, usage and cleanups.
type ownerAPI struct{ *core }

// Status returns the agent's state at a glance.
func (l *ownerAPI) Status(ctx context.Context) control.Status {
	l.mu.Lock()
	st := control.Status{
		Lending:          l.settings.Lending,
		Relay:            l.relay,
		Supervisor:       l.cfg.Pairing,
		Sessions:         len(l.running),
		PendingApprovals: len(l.approvals),
		Cleanups:         len(l.prompts),
		DailySeconds:     l.settings.DailySeconds,
		Version:          l.cfg.Version,
	}
	tz := l.settings.TimeZone
	on := l.settings.Egress
	l.mu.Unlock()
	st.Egress = l.egress.status(on)
	st.WarmPool = l.PoolStatus()
	now := l.clk.Now()
	if sec, err := l.cfg.Ledger.DaySeconds(ctx, localDay(tz, now), now); err == nil {
		st.TodaySeconds = sec
	}
	return st
}

func localDay(tz string, t time.Time) string {
	loc, err := location(tz)
	if err != nil {
		loc = time.Local
	}
	return t.In(loc).Format(time.DateOnly)
}

// Sessions lists the running computers with their live CPU and memory.
func (l *ownerAPI) Sessions(ctx context.Context) []control.Session {
	l.mu.Lock()
	cs := make([]*computer, 0, len(l.running)+len(l.ending))
	for _, c := range l.running {
		cs = append(cs, c)
	}
	ending := map[*computer]bool{}
	for _, c := range l.ending {
		cs = append(cs, c)
		ending[c] = true
	}
	d := l.docker
	l.mu.Unlock()
	slices.SortFunc(cs, func(a, b *computer) int { return a.s.StartedAt.Compare(b.s.StartedAt) })
	now := l.clk.Now()
	out := make([]control.Session, 0, len(cs))
	for _, c := range cs {
		s := control.Session{
			ID: c.s.ComputerID, SessionID: c.s.SessionID, Agent: c.s.Agent, Workspace: c.s.Workspace,
			Provider: Provider, Image: c.s.Image, Started: c.s.StartedAt, Expires: c.s.ExpiresAt,
			TimeLeftSeconds: max(0, int64(c.s.ExpiresAt.Sub(now).Seconds())),
			ViewURL:         l.viewURL(c),
			Machine:         c.s.MachineID,
		}
		sessionState(c, ending[c], &s)
		if d == nil {
			s.StatsError = "Docker not reachable"
		} else if st, err := d.Stats(ctx, c.s.MachineID); err != nil {
			s.StatsError = err.Error()
			if s.State == control.SessionRunning && errors.Is(err, providers.ErrUnavailable) {
				s.State = control.SessionUncertain
				s.StateReason = "Docker does not answer, so the agent cannot tell whether this computer still exists: " + err.Error()
			}
		} else {
			s.MemoryBytes, s.MemoryLimitBytes = st.MemoryBytes, st.MemoryLimitBytes
			at := time.Now()
			c.mu.Lock()
			prev := c.prev
			if prev.at.IsZero() {
				prev = cpuSample{at: c.s.StartedAt, cpu: 0}
			}
			if el := at.Sub(prev.at); el > 0 && st.CPUTime >= prev.cpu {
				s.CPUPercent = float64(st.CPUTime-prev.cpu) / float64(el) * 100
			}
			c.prev = cpuSample{at: at, cpu: st.CPUTime}
			c.mu.Unlock()
		}
		out = append(out, s)
	}
	return out
}

// sessionState sets s's state: stopping while c is being removed (ending)
// or after a failed removal, cleanup_failed after
// control.CleanupFailedAfter failed removals in a row.
func sessionState(c *computer, ending bool, s *control.Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.State = control.SessionRunning
	if c.removeFails == 0 && !ending {
		return
	}
	s.State = control.SessionStopping
	if c.removeFails == 0 {
		s.StateReason = "its computer is being removed"
		return
	}
	if c.removeFails >= control.CleanupFailedAfter {
		s.State = control.SessionCleanupFailed
	}
	s.StateReason, s.FailedAttempts, s.NextAttempt = c.removeErr, c.removeFails, c.retryAt
}

// StopSession stops a running computer for the owner.
func (l *ownerAPI) StopSession(ctx context.Context, id string) (control.Session, error) {
	c, err := l.lookup(id)
	if err != nil {
		return control.Session{}, err
	}
	if err := l.end(ctx, c.s.ComputerID, "stopped by the owner"); err != nil {
		return control.Session{}, err
	}
	return control.Session{
		ID: c.s.ComputerID, SessionID: c.s.SessionID, Agent: c.s.Agent, Workspace: c.s.Workspace,
		Provider: Provider, Image: c.s.Image, Started: c.s.StartedAt, Expires: c.s.ExpiresAt,
	}, nil
}

// ScreenshotPath is computerd's screenshot endpoint.
const ScreenshotPath = "/v1/screenshot"

// Screenshot returns a computer's screen from its computerd, with its
// content type.
func (l *ownerAPI) Screenshot(ctx context.Context, id string) ([]byte, string, error) {
	c, err := l.lookup(id)
	if err != nil {
		return nil, "", err
	}
	c.mu.Lock()
	tok := c.token
	c.mu.Unlock()
	if tok == "" {
		return nil, "", errorf(http.StatusNotFound, lending.CodeNoScreenshot,
			"no screenshot of computer %s yet: the agent can ask its computer only after the supervisor's first call has passed through", c.s.ComputerID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.endpoint, "/")+ScreenshotPath, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := (&http.Client{Transport: l.transport, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, "", errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "computer %s did not answer", c.s.ComputerID)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, "", errorf(http.StatusNotFound, lending.CodeNoScreenshot, "computer %s has no screenshot endpoint (a %s computer has no screen)", c.s.ComputerID, c.s.Image)
	case resp.StatusCode != http.StatusOK:
		return nil, "", errorf(http.StatusBadGateway, lending.CodeUnavailable, "computer %s answered %d to a screenshot", c.s.ComputerID, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, "", errorf(http.StatusBadGateway, lending.CodeUnavailable, "screenshot of %s cut short", c.s.ComputerID)
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "image/png"
	}
	return b, ct, nil
}

// Approvals lists the sessions waiting for the owner, oldest first.
func (l *ownerAPI) Approvals() []control.Approval {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]control.Approval, 0, len(l.approvals))
	for _, a := range l.approvals {
		out = append(out, a.info)
	}
	slices.SortFunc(out, func(a, b control.Approval) int {
		if c := a.Requested.Compare(b.Requested); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Settings returns the owner's limits.
func (l *ownerAPI) Settings() control.Settings { return l.current() }

// SetSettings checks and stores every limit. Nothing changes when a value
// is out of range.
func (l *ownerAPI) SetSettings(s control.Settings) (control.Settings, error) {
	if err := CheckSettings(s); err != nil {
		return control.Settings{}, badRequest("%v", err)
	}
	l.mu.Lock()
	if err := saveSettings(l.cfg.DataDir, s); err != nil {
		l.mu.Unlock()
		return control.Settings{}, err
	}
	old := l.settings
	l.settings = s
	l.pool.Poke()
	l.log.Info("owner changed the limits", "lending", s.Lending, "maxComputers", s.MaxComputers, "cpus", s.CPUs,
		"memoryMB", s.MemoryMB, "dailySeconds", s.DailySeconds, "hours", s.Hours, "timeZone", s.TimeZone,
		"desktop", s.Desktop, "approval", s.Approval, "egress", s.Egress, "warmPoolSize", s.WarmPoolSize)
	l.mu.Unlock()
	if old.Egress != s.Egress {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		l.egress.apply(ctx, s.Egress)
		cancel()
	}
	// Waiting computers were made under the old limits: any change empties
	// the pool, and it refills under the new ones.
	if !reflect.DeepEqual(old, s) {
		if n := l.drainPool("the owner changed the settings"); n > 0 {
			l.log.Info("warm pool emptied for the new settings", "removed", n)
		}
	}
	return s, nil
}

// UpdateSettings changes the limits u sets.
func (l *ownerAPI) UpdateSettings(u control.SettingsUpdate) (control.Settings, error) {
	l.mu.Lock()
	s := applyUpdate(l.settings, u)
	l.mu.Unlock()
	return l.SetSettings(s)
}

// MaxUsageDays bounds a usage history.
const MaxUsageDays = 90

// Usage returns today's lending and the last days, from the ledger.
func (l *ownerAPI) Usage(ctx context.Context, days int) (control.Usage, error) {
	if days == 0 {
		days = 14
	}
	if days < 1 || days > MaxUsageDays {
		return control.Usage{}, badRequest("days: %d is outside 1..%d", days, MaxUsageDays)
	}
	s := l.Settings()
	loc, err := location(s.TimeZone)
	if err != nil {
		loc = time.Local
	}
	now := l.clk.Now()
	today := now.In(loc)
	y, m, d := today.Date()
	first := time.Date(y, m, d-(days-1), 12, 0, 0, 0, loc).Format(time.DateOnly)
	byDay, byAgent, byWS, err := l.cfg.Ledger.Totals(ctx, first, today.Format(time.DateOnly), now)
	if err != nil {
		return control.Usage{}, err
	}
	u := control.Usage{TimeZone: loc.String(), DailySeconds: s.DailySeconds,
		ByAgent: rows(byAgent), ByWorkspace: rows(byWS)}
	have := map[string]ledger.Row{}
	for _, r := range byDay {
		have[r.Key] = r
	}
	for i := days - 1; i >= 0; i-- {
		day := time.Date(y, m, d-i, 12, 0, 0, 0, loc).Format(time.DateOnly)
		r := have[day]
		u.Days = append(u.Days, control.DayUsage{Day: day, Seconds: r.Seconds, Sessions: r.Sessions})
	}
	u.Today = u.Days[len(u.Days)-1]
	return u, nil
}

func rows(rs []ledger.Row) []control.UsageRow {
	out := make([]control.UsageRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, control.UsageRow{Key: r.Key, Seconds: r.Seconds, Sessions: r.Sessions})
	}
	return out
}

// Decide approves or denies a waiting session.
func (l *ownerAPI) Decide(id string, approve bool) (control.Approval, error) {
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

// Cleanups lists the open cleanup prompts.
func (l *ownerAPI) Cleanups() []control.CleanupPrompt {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]control.CleanupPrompt, 0, len(l.prompts))
	for _, p := range l.prompts {
		out = append(out, *p)
	}
	return out
}

// ResolveCleanup removes a leftover (remove) or keeps it and stops asking.
func (l *ownerAPI) ResolveCleanup(ctx context.Context, id string, remove bool) (control.CleanupPrompt, error) {
	l.mu.Lock()
	i := slices.IndexFunc(l.prompts, func(p *control.CleanupPrompt) bool { return p.ID == id })
	if i < 0 {
		l.mu.Unlock()
		return control.CleanupPrompt{}, errorf(http.StatusNotFound, lending.CodeNotFound, "no cleanup prompt %q", id)
	}
	p := *l.prompts[i]
	l.mu.Unlock()
	if remove {
		if err := l.cfg.Engine.Remove(ctx, p.Kind, p.Name); err != nil {
			msg := err.Error()
			if p.Kind != control.KindContainer && strings.Contains(msg, "in use") {
				msg += " (remove its container first)"
			}
			return p, errorf(http.StatusConflict, lending.CodeConflict, "%s", msg)
		}
		p.State = control.CleanupRemoved
	} else {
		if err := l.cfg.Ledger.Keep(ctx, p.Kind, p.Name, l.clk.Now()); err != nil {
			return p, err
		}
		p.State = control.CleanupKept
	}
	l.mu.Lock()
	l.prompts = slices.DeleteFunc(l.prompts, func(q *control.CleanupPrompt) bool { return q.ID == id })
	l.mu.Unlock()
	l.log.Info("leftover resolved", "prompt", id, "kind", p.Kind, "name", p.Name, "state", p.State)
	return p, nil
}

var _ control.Backend = (*Lender)(nil)
