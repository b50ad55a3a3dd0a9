package console

import "fmt"

// chart is a bar chart of seconds by day, drawn by the server as SVG.
type chart struct {
	Width, Height int
	Label         string // what the chart shows, for screen readers
	Bars          []bar
	Ticks         []tick
	Base          int // the y of the x axis
	Left          int // the x of the y axis
	Max           string
}

type bar struct {
	X, Y, W, H int
	Title      string
	Class      string
}

type tick struct {
	X, Y int
	Text string
}

// drawChart draws one bar per day, stacked by key.
func drawChart(s usageSeries) chart {
	const w, h, left, top, bottom = 640, 220, 56, 12, 28
	c := chart{Width: w, Height: h, Base: h - bottom, Left: left,
		Label: fmt.Sprintf("Seconds of computer time per day for the last %d days, by %s", len(s.Days), s.By)}
	var most int64
	for _, d := range s.Days {
		most = max(most, d.Total)
	}
	c.Max = duration(most)
	if most == 0 {
		most = 1
	}
	plot := h - top - bottom
	step := (w - left - 8) / max(len(s.Days), 1)
	for i, d := range s.Days {
		x := left + 4 + i*step
		y := c.Base
		for k, sec := range d.Seconds {
			if sec == 0 {
				continue
			}
			bh := max(int(int64(plot)*sec/most), 1)
			y -= bh
			c.Bars = append(c.Bars, bar{X: x, Y: y, W: max(step-2, 1), H: bh, Class: fmt.Sprintf("k%d", k%6),
				Title: fmt.Sprintf("%s, %s: %s", d.Day, s.Keys[k], duration(sec))})
		}
		if i%7 == 0 || (i == len(s.Days)-1 && i%7 >= 4) {
			c.Ticks = append(c.Ticks, tick{X: x + step/2, Y: h - 8, Text: d.Day[5:]})
		}
	}
	return c
}
