package ui

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"slices"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
)

// previewSize is the size of a desktop session's screen preview.
var previewSize = fyne.NewSize(320, 200)

// sessionsView lists the running sessions.
type sessionsView struct {
	u       *UI
	empty   *widget.Label
	list    *fyne.Container
	content fyne.CanvasObject
	cards   map[string]*sessionCard
	order   []string
}

func newSessionsView(u *UI) *sessionsView {
	v := &sessionsView{u: u, cards: map[string]*sessionCard{}}
	v.empty = widget.NewLabel("No sessions are running on this machine.")
	v.list = container.NewVBox(v.empty)
	v.content = container.NewVScroll(v.list)
	return v
}

// sessionCard is one session: who uses it, its time and figures, its
// screen, and its buttons.
type sessionCard struct {
	card    *widget.Card
	timing  *widget.Label
	figures *widget.Label
	preview *canvas.Image
	waiting *widget.Label
	stop    *widget.Button
	live    *widget.Button
	status  *widget.Label
	session control.Session
	shot    []byte
}

func (v *sessionsView) newCard(s control.Session) *sessionCard {
	c := &sessionCard{session: s}
	c.timing = widget.NewLabel("")
	c.figures = widget.NewLabel("")
	c.status = widget.NewLabel("")
	c.status.Wrapping = fyne.TextWrapWord
	c.status.Hide()
	c.stop = widget.NewButton("Stop session", func() { v.stop(c) })
	c.stop.Importance = widget.DangerImportance
	rows := []fyne.CanvasObject{c.timing, c.figures}
	buttons := container.NewHBox(c.stop)
	if s.Image == "desktop" {
		c.preview = canvas.NewImageFromImage(image.NewRGBA(image.Rect(0, 0, 16, 10)))
		c.preview.FillMode = canvas.ImageFillContain
		c.preview.ScaleMode = canvas.ImageScaleFastest
		c.preview.SetMinSize(previewSize)
		c.waiting = widget.NewLabel("Waiting for the screen…")
		rows = append(rows, container.NewStack(c.preview, container.NewCenter(c.waiting)))
		c.live = widget.NewButton("Open live view", func() { v.openLive(c) })
		buttons.Add(c.live)
	}
	rows = append(rows, buttons, c.status)
	c.card = widget.NewCard("", "", container.NewVBox(rows...))
	return c
}

func (v *sessionsView) apply(s snapshot, now time.Time) {
	ids := make([]string, 0, len(s.sessions))
	for _, x := range s.sessions {
		ids = append(ids, x.ID)
		c, ok := v.cards[x.ID]
		if !ok || (c.preview != nil) != (x.Image == "desktop") {
			c = v.newCard(x)
			v.cards[x.ID] = c
		}
		if c.update(x, s.shots[x.ID], now, v.u.opts.Location) {
			v.u.log.Debug("screen preview updated", "session", x.ID, "bytes", len(s.shots[x.ID]))
		}
	}
	for id := range v.cards {
		if !slices.Contains(ids, id) {
			delete(v.cards, id)
		}
	}
	if slices.Equal(ids, v.order) {
		return
	}
	v.order = ids
	objs := []fyne.CanvasObject{}
	if len(ids) == 0 {
		objs = append(objs, v.empty)
	}
	for _, id := range ids {
		objs = append(objs, v.cards[id].card)
	}
	v.list.Objects = objs
	v.list.Refresh()
}

// update shows s; it reports whether the screen preview changed.
func (c *sessionCard) update(s control.Session, shot []byte, now time.Time, loc *time.Location) bool {
	c.session = s
	c.card.SetTitle(s.Agent)
	c.card.SetSubTitle(fmt.Sprintf("Workspace %s · provider %s · %s computer", s.Workspace, s.Provider, s.Image))
	left := s.TimeLeftSeconds
	if !s.Expires.IsZero() {
		left = int64(s.Expires.Sub(now).Round(time.Second) / time.Second)
	}
	c.timing.SetText(fmt.Sprintf("Started %s · %s left", clockTime(s.Started, now, loc), duration(left)))
	if s.StatsError != "" {
		c.figures.SetText("CPU and memory unknown: " + s.StatsError)
	} else {
		mem := bytesize(s.MemoryBytes)
		if s.MemoryLimitBytes > 0 {
			mem += " of " + bytesize(s.MemoryLimitBytes)
		}
		c.figures.SetText(fmt.Sprintf("CPU %.1f%% · memory %s", s.CPUPercent, mem))
	}
	if c.preview == nil || shot == nil || bytes.Equal(shot, c.shot) {
		return false
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		return false
	}
	c.shot = shot
	c.preview.Image = img
	c.preview.Refresh()
	c.waiting.Hide()
	return true
}

func (v *sessionsView) stop(c *sessionCard) {
	id, who := c.session.ID, c.session.Agent
	c.stop.Disable()
	c.status.SetText("Stopping…")
	c.status.Show()
	v.u.act("stop session", func(ctx context.Context) (string, error) {
		_, err := v.u.agent.StopSession(ctx, id)
		return "", err
	}, func(_ string, err error) {
		c.stop.Enable()
		if err != nil {
			c.status.SetText("Could not stop the session of " + who + ": " + errText(err))
			return
		}
		c.status.Hide()
	})
}

func (v *sessionsView) openLive(c *sessionCard) {
	target, err := liveViewURL(v.u.lastSnap.status.Supervisor.URL, c.session)
	if err == nil {
		err = v.u.openURL(target)
	}
	if err != nil {
		c.status.SetText("Could not open the live view: " + err.Error())
		c.status.Show()
		return
	}
	c.status.Hide()
}
