package ui

import (
	"fmt"
	"image/color"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
)

// usageView shows today's lending against the budget, the last 14 days
// as a bar chart, and totals by agent and by workspace.
type usageView struct {
	today       *widget.Label
	bar         *widget.ProgressBar
	chart       *barChart
	summary     *widget.Label
	byAgent     *widget.Label
	byWorkspace *widget.Label
	content     fyne.CanvasObject
	last        string
}

func newUsageView(*UI) *usageView {
	v := &usageView{
		today:       widget.NewLabel("Today: nothing lent yet"),
		bar:         widget.NewProgressBar(),
		chart:       newBarChart(),
		summary:     widget.NewLabel(""),
		byAgent:     widget.NewLabel("No lending yet."),
		byWorkspace: widget.NewLabel("No lending yet."),
	}
	v.summary.Wrapping = fyne.TextWrapWord
	v.bar.TextFormatter = func() string {
		if v.bar.Max <= 0 {
			return "no budget"
		}
		return fmt.Sprintf("%.0f%% of today's budget", 100*v.bar.Value/v.bar.Max)
	}
	v.content = container.NewVScroll(container.NewVBox(
		widget.NewLabelWithStyle("Today", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}),
		v.today, v.bar,
		widget.NewLabelWithStyle("Last 14 days", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}),
		v.chart, v.summary,
		container.NewGridWithColumns(2,
			container.NewVBox(widget.NewLabelWithStyle("By agent", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), v.byAgent),
			container.NewVBox(widget.NewLabelWithStyle("By workspace", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), v.byWorkspace),
		),
	))
	return v
}

func (v *usageView) apply(u control.Usage) {
	key := fmt.Sprint(u)
	if key == v.last {
		return
	}
	v.last = key
	v.today.SetText(fmt.Sprintf("Today: %s lent of a %s budget (%s)",
		duration(u.Today.Seconds), duration(u.DailySeconds), plural(u.Today.Sessions, "session", "sessions")))
	v.bar.Max = float64(u.DailySeconds)
	v.bar.SetValue(min(float64(u.Today.Seconds), v.bar.Max))
	v.chart.set(u.Days, u.DailySeconds)
	var total int64
	busiest := control.DayUsage{}
	for _, d := range u.Days {
		total += d.Seconds
		if d.Seconds > busiest.Seconds {
			busiest = d
		}
	}
	if busiest.Seconds > 0 {
		v.summary.SetText(fmt.Sprintf("%s lent over %d days; the most on %s (%s).", duration(total), len(u.Days), busiest.Day, duration(busiest.Seconds)))
	} else {
		v.summary.SetText(fmt.Sprintf("Nothing lent over the last %d days.", len(u.Days)))
	}
	v.byAgent.SetText(rows(u.ByAgent))
	v.byWorkspace.SetText(rows(u.ByWorkspace))
}

func rows(rs []control.UsageRow) string {
	if len(rs) == 0 {
		return "No lending yet."
	}
	lines := make([]string, 0, len(rs))
	for _, r := range rs {
		lines = append(lines, fmt.Sprintf("%s: %s (%s)", r.Key, duration(r.Seconds), plural(r.Sessions, "session", "sessions")))
	}
	return strings.Join(lines, "\n")
}

// barChart draws one bar per day, scaled to the larger of the busiest day
// and the daily budget, with the day of the month below each bar and a
// line at the budget.
type barChart struct {
	widget.BaseWidget
	days   []control.DayUsage
	budget int64
}

func newBarChart() *barChart {
	c := &barChart{}
	c.ExtendBaseWidget(c)
	return c
}

func (c *barChart) set(days []control.DayUsage, budget int64) {
	c.days, c.budget = days, budget
	c.Refresh()
}

// CreateRenderer draws the chart.
func (c *barChart) CreateRenderer() fyne.WidgetRenderer {
	r := &chartRenderer{c: c, budgetLine: canvas.NewLine(theme.Color(theme.ColorNameWarning))}
	r.budgetLine.StrokeWidth = 1
	r.Refresh()
	return r
}

type chartRenderer struct {
	c          *barChart
	bars       []*canvas.Rectangle
	labels     []*canvas.Text
	budgetLine *canvas.Line
	objects    []fyne.CanvasObject
}

const chartLabelHeight = 18

func (r *chartRenderer) Layout(size fyne.Size) {
	n := len(r.bars)
	if n == 0 {
		return
	}
	top := r.scale()
	slot := size.Width / float32(n)
	plot := size.Height - chartLabelHeight
	for i, b := range r.bars {
		h := float32(0)
		if top > 0 {
			h = plot * float32(r.c.days[i].Seconds) / float32(top)
		}
		b.Move(fyne.NewPos(float32(i)*slot+slot*0.15, plot-h))
		b.Resize(fyne.NewSize(slot*0.7, h))
		l := r.labels[i]
		ls := l.MinSize()
		l.Move(fyne.NewPos(float32(i)*slot+(slot-ls.Width)/2, plot+2))
		l.Resize(ls)
	}
	if r.c.budget > 0 && top > 0 {
		y := plot - plot*float32(r.c.budget)/float32(top)
		r.budgetLine.Position1 = fyne.NewPos(0, y)
		r.budgetLine.Position2 = fyne.NewPos(size.Width, y)
		r.budgetLine.Show()
	} else {
		r.budgetLine.Hide()
	}
}

func (r *chartRenderer) scale() int64 {
	top := r.c.budget
	for _, d := range r.c.days {
		top = max(top, d.Seconds)
	}
	return top
}

func (r *chartRenderer) MinSize() fyne.Size {
	return fyne.NewSize(float32(max(len(r.bars), 1))*24, 140)
}

func (r *chartRenderer) Refresh() {
	if len(r.bars) != len(r.c.days) {
		r.bars, r.labels = nil, nil
		for range r.c.days {
			r.bars = append(r.bars, canvas.NewRectangle(color.Transparent))
			t := canvas.NewText("", theme.Color(theme.ColorNameForeground))
			t.TextSize = theme.CaptionTextSize()
			r.labels = append(r.labels, t)
		}
		r.objects = []fyne.CanvasObject{}
		for i := range r.bars {
			r.objects = append(r.objects, r.bars[i], r.labels[i])
		}
		r.objects = append(r.objects, r.budgetLine)
	}
	for i, d := range r.c.days {
		r.bars[i].FillColor = theme.Color(theme.ColorNamePrimary)
		r.bars[i].Refresh()
		day := d.Day
		if len(day) == len("2006-01-02") {
			day = strings.TrimLeft(day[8:], "0")
		}
		r.labels[i].Text = day
		r.labels[i].Color = theme.Color(theme.ColorNameForeground)
		r.labels[i].Refresh()
	}
	r.budgetLine.StrokeColor = theme.Color(theme.ColorNameWarning)
	r.Layout(r.c.Size())
	canvas.Refresh(r.c)
}

func (r *chartRenderer) Objects() []fyne.CanvasObject { return r.objects }
func (r *chartRenderer) Destroy()                     {}
