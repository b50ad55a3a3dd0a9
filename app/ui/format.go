package ui

import (
	"fmt"
	"time"
)

// duration formats seconds for people: "45s", "14m 30s", "2h 05m".
func duration(seconds int64) string {
	if seconds < 0 {
		seconds = 0
	}
	switch {
	case seconds < 60:
		return fmt.Sprintf("%ds", seconds)
	case seconds < 3600:
		return fmt.Sprintf("%dm %02ds", seconds/60, seconds%60)
	default:
		return fmt.Sprintf("%dh %02dm", seconds/3600, seconds%3600/60)
	}
}

// bytesize formats a memory figure: "300 MB", "1.5 GB".
func bytesize(b uint64) string {
	const mb = 1 << 20
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%d MB", (b+mb/2)/mb)
}

// clockTime formats a time of day in loc, with the date when it is not
// the same day as now.
func clockTime(t, now time.Time, loc *time.Location) string {
	t, now = t.In(loc), now.In(loc)
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 2 15:04")
}

// plural is "1 session", "2 sessions".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
