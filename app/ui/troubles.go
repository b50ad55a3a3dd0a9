package ui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
)

// troubleRow is the notice of a session that is uncertain or whose
// cleanup failed: what happened and what the owner can do, with Try again
// (a new stop) where that can help.
type troubleRow struct {
	row   *fyne.Container
	label *widget.Label
	retry *widget.Button // nil for an uncertain session
	out   *widget.Label
	s     control.Session
}

// troubled reports whether s needs the owner: uncertain, or its cleanup
// failed.
func troubled(s control.Session) bool {
	return s.State == control.SessionUncertain || s.State == control.SessionCleanupFailed
}

// machineName is the Docker container of s.
func machineName(s control.Session) string {
	if s.Machine != "" {
		return s.Machine
	}
	return "berth-c-" + s.ID
}

// troubleText says what happened to s and what the owner can do.
func troubleText(s control.Session, now time.Time, loc *time.Location) string {
	who := "agent " + s.Agent
	if s.Workspace != "" {
		who += " (workspace " + s.Workspace + ")"
	}
	var b strings.Builder
	switch s.State {
	case control.SessionCleanupFailed:
		fmt.Fprintf(&b, "The computer of %s could not be removed after %s", who, plural(int64(s.FailedAttempts), "attempt", "attempts"))
		if s.StateReason != "" {
			b.WriteString(": " + s.StateReason)
		}
		b.WriteString(". It may still be on Docker and use this machine.")
		if !s.NextAttempt.IsZero() {
			b.WriteString(" Berth tries again at " + clockTime(s.NextAttempt, now, loc) + ".")
		}
		fmt.Fprintf(&b, " To remove it by hand, run docker rm -f %s, then press Try again: Berth removes its network and volume and closes the session.", machineName(s))
	default:
		fmt.Fprintf(&b, "Berth cannot tell whether the computer of %s still exists", who)
		if s.StateReason != "" {
			b.WriteString(": " + s.StateReason)
		}
		fmt.Fprintf(&b, ". Check that Docker runs (docker info) and look for its container with docker ps -a --filter name=%s; this notice goes once Docker answers.", machineName(s))
	}
	return b.String()
}

// troubleTitle is the desktop notification's one line for s.
func troubleTitle(s control.Session) string {
	if s.State == control.SessionCleanupFailed {
		return fmt.Sprintf("The computer of agent %s could not be removed. Open Berth to remove it.", s.Agent)
	}
	return fmt.Sprintf("Berth cannot tell whether the computer of agent %s still exists. Open Berth to see why.", s.Agent)
}

func (p *promptsView) newTrouble(s control.Session) *troubleRow {
	r := &troubleRow{s: s}
	r.label = widget.NewLabel("")
	r.label.Wrapping = fyne.TextWrapWord
	r.out = widget.NewLabel("")
	r.out.Wrapping = fyne.TextWrapWord
	r.out.Hide()
	var right fyne.CanvasObject
	if s.State == control.SessionCleanupFailed {
		r.retry = widget.NewButtonWithIcon("Try again", theme.ViewRefreshIcon(), func() { p.retryRemoval(r) })
		r.retry.Importance = widget.DangerImportance
		right = container.NewVBox(r.retry)
	}
	r.row = container.NewBorder(nil, r.out, widget.NewIcon(theme.WarningIcon()), right, r.label)
	return r
}

// applyTroubles keeps one notice per troubled session of ss and sends a
// desktop notification the first time each session is troubled.
func (p *promptsView) applyTroubles(ss []control.Session, now time.Time) {
	seen := map[string]bool{}
	for _, s := range ss {
		if !troubled(s) {
			continue
		}
		seen[s.ID] = true
		r, ok := p.troubles[s.ID]
		if !ok || (r.retry != nil) != (s.State == control.SessionCleanupFailed) {
			r = p.newTrouble(s)
			p.troubles[s.ID] = r
		}
		r.s = s
		r.label.SetText(troubleText(s, now, p.u.opts.Location))
		if key := "trouble:" + s.ID; !p.u.notified[key] {
			p.u.notified[key] = true
			p.u.app.SendNotification(fyne.NewNotification("Berth: a session needs you", troubleTitle(s)))
		}
	}
	for id := range p.troubles {
		if !seen[id] {
			delete(p.troubles, id)
		}
	}
}

// troubleCard is the card of the troubled sessions, oldest first; nil when
// there are none. It is rebuilt only when the sessions in it change.
func (p *promptsView) troubleCard() *widget.Card {
	if len(p.troubles) == 0 {
		p.troublesCard, p.troublesKey = nil, ""
		return nil
	}
	rows := make([]*troubleRow, 0, len(p.troubles))
	for _, r := range p.troubles {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *troubleRow) int {
		if c := a.s.Started.Compare(b.s.Started); c != 0 {
			return c
		}
		return strings.Compare(a.s.ID, b.s.ID)
	})
	key := ""
	for _, r := range rows {
		key += r.s.ID + "\x00"
	}
	if p.troublesCard == nil || key != p.troublesKey {
		box := container.NewVBox()
		for _, r := range rows {
			box.Add(r.row)
		}
		p.troublesCard, p.troublesKey = widget.NewCard("Sessions that need you", "", box), key
	}
	return p.troublesCard
}

// retryRemoval stops the session again, which retries removing its
// computer.
func (p *promptsView) retryRemoval(r *troubleRow) {
	r.retry.Disable()
	id := r.s.ID
	p.u.act("retry removal", func(ctx context.Context) (string, error) {
		_, err := p.u.agent.StopSession(ctx, id)
		return "", err
	}, func(_ string, err error) {
		r.retry.Enable()
		if err != nil {
			r.out.SetText("Still not removed: " + errText(err))
			r.out.Show()
			return
		}
		r.out.Hide()
	})
}
