package ui

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/app/agentlink"
)

// promptsView is the band above the views with what needs the owner:
// approvals with their countdown, leftovers of a crash, the budget
// warning and notices of trouble.
type promptsView struct {
	u         *UI
	box       *fyne.Container
	approvals map[string]*approvalCard
	leftovers map[string]*leftoverRow
	notices   map[string]string
	budget    *widget.Label
	budgetRow fyne.CanvasObject
	// noticeRows and cleanupCard are kept while their content stays.
	noticeRows  map[string]noticeRow
	cleanupCard *widget.Card
	cleanupKey  string
	// troubles are the sessions that are uncertain or whose cleanup
	// failed (troubles.go), shown in troublesCard.
	troubles     map[string]*troubleRow
	troublesCard *widget.Card
	troublesKey  string
}

type noticeRow struct {
	text string
	row  fyne.CanvasObject
}

func newPromptsView(u *UI) *promptsView {
	p := &promptsView{
		u:         u,
		box:       container.NewVBox(),
		approvals: map[string]*approvalCard{},
		leftovers: map[string]*leftoverRow{},
		notices:   map[string]string{},
		troubles:  map[string]*troubleRow{},
	}
	p.budget = widget.NewLabel("")
	p.budget.Wrapping = fyne.TextWrapWord
	p.budgetRow = container.NewBorder(nil, nil, widget.NewIcon(theme.WarningIcon()), nil, p.budget)
	p.noticeRows = map[string]noticeRow{}
	return p
}

type approvalCard struct {
	card      *widget.Card
	countdown *widget.Label
	approve   *widget.Button
	deny      *widget.Button
	out       *widget.Label
	a         control.Approval
}

type leftoverRow struct {
	row    *fyne.Container
	label  *widget.Label
	remove *widget.Button
	keep   *widget.Button
	c      control.CleanupPrompt
}

// notice sets the notice under key (replacing an earlier one).
func (p *promptsView) notice(key, text string) {
	if p.notices[key] == text {
		return
	}
	p.notices[key] = text
	p.layout()
}

func (p *promptsView) clearNotice(key string) {
	if _, ok := p.notices[key]; !ok {
		return
	}
	delete(p.notices, key)
	p.layout()
}

func (p *promptsView) apply(s snapshot, now time.Time) {
	pending := map[string]bool{}
	for _, a := range s.approvals {
		if a.State != "" && a.State != control.ApprovalPending {
			continue
		}
		pending[a.ID] = true
		c, ok := p.approvals[a.ID]
		if !ok {
			c = p.newApproval(a)
			p.approvals[a.ID] = c
			if !p.u.notified[a.ID] {
				p.u.notified[a.ID] = true
				p.u.app.SendNotification(fyne.NewNotification("Berth: approve a session?", approvalText(a)))
			}
		}
		c.a = a
		left := int64(a.Deadline.Sub(now).Round(time.Second) / time.Second)
		c.countdown.SetText(fmt.Sprintf("Denied automatically in %s unless you approve.", duration(max(left, 0))))
	}
	for id := range p.approvals {
		if !pending[id] {
			delete(p.approvals, id)
		}
	}

	open := map[string]bool{}
	for _, c := range s.cleanups {
		if c.State != "" && c.State != control.CleanupOpen {
			continue
		}
		open[c.ID] = true
		if _, ok := p.leftovers[c.ID]; !ok {
			p.leftovers[c.ID] = p.newLeftover(c)
		}
	}
	for id := range p.leftovers {
		if !open[id] {
			delete(p.leftovers, id)
		}
	}

	p.applyTroubles(s.sessions, now)

	if agentlink.NearlySpent(s.usage) {
		if key := "budget:" + s.usage.Today.Day; !p.u.notified[key] {
			p.u.notified[key] = true
			p.u.app.SendNotification(fyne.NewNotification("Berth: lending budget nearly spent",
				fmt.Sprintf("%s of today's %s are used.", duration(s.usage.Today.Seconds), duration(s.usage.DailySeconds))))
		}
		p.budget.SetText(fmt.Sprintf("Today's lending budget is nearly spent: %s of %s used. New sessions are refused once it is.",
			duration(s.usage.Today.Seconds), duration(s.usage.DailySeconds)))
	} else {
		p.budget.SetText("")
	}
	p.layout()
}

func approvalText(a control.Approval) string {
	return fmt.Sprintf("Agent %s of workspace %s asks for a %s computer on this machine.", a.Agent, a.Workspace, a.Image)
}

func (p *promptsView) newApproval(a control.Approval) *approvalCard {
	c := &approvalCard{a: a}
	c.countdown = widget.NewLabel("")
	c.out = widget.NewLabel("")
	c.out.Hide()
	c.approve = widget.NewButtonWithIcon("Approve", theme.ConfirmIcon(), func() { p.decide(c, true) })
	c.approve.Importance = widget.HighImportance
	c.deny = widget.NewButtonWithIcon("Deny", theme.CancelIcon(), func() { p.decide(c, false) })
	text := widget.NewLabel(approvalText(a))
	text.Wrapping = fyne.TextWrapWord
	c.card = widget.NewCard("Approve a session?", "", container.NewVBox(text, c.countdown, container.NewHBox(c.approve, c.deny), c.out))
	return c
}

func (p *promptsView) decide(c *approvalCard, approve bool) {
	c.approve.Disable()
	c.deny.Disable()
	id := c.a.ID
	p.u.act("decide approval", func(ctx context.Context) (string, error) {
		var err error
		if approve {
			_, err = p.u.agent.Approve(ctx, id)
		} else {
			_, err = p.u.agent.Deny(ctx, id)
		}
		return "", err
	}, func(_ string, err error) {
		if err != nil {
			c.approve.Enable()
			c.deny.Enable()
			c.out.SetText("Could not send your answer: " + errText(err))
			c.out.Show()
		}
	})
}

func (p *promptsView) newLeftover(c control.CleanupPrompt) *leftoverRow {
	r := &leftoverRow{c: c}
	text := fmt.Sprintf("%s %s", c.Kind, c.Name)
	if c.Agent != "" {
		text += " (agent " + c.Agent + ")"
	}
	if c.Reason != "" {
		text += ": " + c.Reason
	}
	r.label = widget.NewLabel(text)
	r.label.Wrapping = fyne.TextWrapWord
	r.remove = widget.NewButtonWithIcon("Remove", theme.DeleteIcon(), func() { p.resolve(r, true) })
	r.remove.Importance = widget.DangerImportance
	r.keep = widget.NewButton("Keep", func() { p.resolve(r, false) })
	r.row = container.NewBorder(nil, nil, nil, container.NewHBox(r.remove, r.keep), r.label)
	return r
}

func (p *promptsView) resolve(r *leftoverRow, remove bool) {
	r.remove.Disable()
	r.keep.Disable()
	id, what := r.c.ID, r.c.Kind+" "+r.c.Name
	p.u.act("resolve leftover", func(ctx context.Context) (string, error) {
		var err error
		if remove {
			_, err = p.u.agent.RemoveLeftover(ctx, id)
		} else {
			_, err = p.u.agent.KeepLeftover(ctx, id)
		}
		return "", err
	}, func(_ string, err error) {
		if err != nil {
			r.remove.Enable()
			r.keep.Enable()
			p.notice("cleanup:"+id, "Could not "+map[bool]string{true: "remove", false: "keep"}[remove]+" "+what+": "+errText(err))
			return
		}
		p.clearNotice("cleanup:" + id)
	})
}

// layout puts the prompts in order: notices, the sessions that need the
// owner, the budget warning, approvals (soonest deadline first), then the
// leftovers.
func (p *promptsView) layout() {
	var objs []fyne.CanvasObject
	keys := make([]string, 0, len(p.notices))
	for k := range p.notices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, ok := p.noticeRows[k]
		if !ok || w.text != p.notices[k] {
			l := widget.NewLabelWithStyle(p.notices[k], fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
			l.Wrapping = fyne.TextWrapWord
			w = noticeRow{text: p.notices[k], row: container.NewBorder(nil, nil, widget.NewIcon(theme.WarningIcon()), nil, l)}
			p.noticeRows[k] = w
		}
		objs = append(objs, w.row)
	}
	for k := range p.noticeRows {
		if _, ok := p.notices[k]; !ok {
			delete(p.noticeRows, k)
		}
	}
	if c := p.troubleCard(); c != nil {
		objs = append(objs, c)
	}
	if p.budget.Text != "" {
		objs = append(objs, p.budgetRow)
	}
	cards := make([]*approvalCard, 0, len(p.approvals))
	for _, c := range p.approvals {
		cards = append(cards, c)
	}
	slices.SortFunc(cards, func(a, b *approvalCard) int {
		if c := a.a.Deadline.Compare(b.a.Deadline); c != 0 {
			return c
		}
		return strings.Compare(a.a.ID, b.a.ID)
	})
	for _, c := range cards {
		objs = append(objs, c.card)
	}
	if len(p.leftovers) > 0 {
		rows := make([]*leftoverRow, 0, len(p.leftovers))
		for _, r := range p.leftovers {
			rows = append(rows, r)
		}
		slices.SortFunc(rows, func(a, b *leftoverRow) int { return strings.Compare(a.c.Kind+a.c.Name, b.c.Kind+b.c.Name) })
		key := ""
		for _, r := range rows {
			key += r.c.ID + "\x00"
		}
		if p.cleanupCard == nil || key != p.cleanupKey {
			box := container.NewVBox(widget.NewLabel("Berth found these on Docker after a restart. Remove them, or keep them if they are yours."))
			for _, r := range rows {
				box.Add(r.row)
			}
			p.cleanupCard, p.cleanupKey = widget.NewCard("Clean up after a crash", "", box), key
		}
		objs = append(objs, p.cleanupCard)
	}
	if slices.Equal(objs, p.box.Objects) {
		return
	}
	p.box.Objects = objs
	p.box.Refresh()
}
