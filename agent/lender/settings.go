package lender

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // owners name any IANA zone, whatever the machine has installed

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/lending"
)

// SettingsFile is where the owner's limits are kept in the data folder.
const SettingsFile = "settings.json"

// Ranges the owner's limits are checked against.
const (
	MinComputers          = 1
	MaxComputers          = 64
	MinDailySeconds       = 60
	MaxDailySeconds       = 86400
	MinApprovalTimeoutSec = 10
	MaxApprovalTimeoutSec = 3600
)

// DefaultSettings are the limits of a newly paired machine: lending on, two
// computers of 1 CPU and 2 GB at a time, four hours a day, at any hour,
// desktop allowed, no approval, egress through the agent's proxy, no warm
// pool.
func DefaultSettings() control.Settings {
	return control.Settings{
		Lending:                true,
		MaxComputers:           2,
		CPUs:                   1,
		MemoryMB:               2048,
		DailySeconds:           4 * 3600,
		Desktop:                true,
		ApprovalTimeoutSeconds: 120,
		Egress:                 true,
	}
}

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// CheckSettings returns an error naming the first field out of range.
func CheckSettings(s control.Settings) error {
	switch {
	case s.MaxComputers < MinComputers || s.MaxComputers > MaxComputers:
		return fmt.Errorf("maxComputers: %d is outside %d..%d", s.MaxComputers, MinComputers, MaxComputers)
	case math.IsNaN(s.CPUs) || s.CPUs < lending.MinCPUs || s.CPUs > lending.MaxCPUs:
		return fmt.Errorf("cpus: %g is outside %g..%d", s.CPUs, lending.MinCPUs, lending.MaxCPUs)
	case s.MemoryMB < lending.MinMemoryMB || s.MemoryMB > lending.MaxMemoryMB:
		return fmt.Errorf("memoryMB: %d is outside %d..%d", s.MemoryMB, lending.MinMemoryMB, lending.MaxMemoryMB)
	case s.DailySeconds < MinDailySeconds || s.DailySeconds > MaxDailySeconds:
		return fmt.Errorf("dailySeconds: %d is outside %d..%d", s.DailySeconds, MinDailySeconds, MaxDailySeconds)
	case s.ApprovalTimeoutSeconds < MinApprovalTimeoutSec || s.ApprovalTimeoutSeconds > MaxApprovalTimeoutSec:
		return fmt.Errorf("approvalTimeoutSeconds: %d is outside %d..%d", s.ApprovalTimeoutSeconds, MinApprovalTimeoutSec, MaxApprovalTimeoutSec)
	case s.WarmPoolSize < 0 || s.WarmPoolSize > s.MaxComputers:
		return fmt.Errorf("warmPoolSize: %d is outside 0..%d (waiting computers count toward maxComputers)", s.WarmPoolSize, s.MaxComputers)
	case s.WarmPoolMax != 0 && (s.WarmPoolMax < s.WarmPoolSize || s.WarmPoolMax > s.MaxComputers):
		return fmt.Errorf("warmPoolMax: %d is outside %d..%d (at least warmPoolSize; waiting computers count toward maxComputers), or 0 for a fixed size", s.WarmPoolMax, s.WarmPoolSize, s.MaxComputers)
	}
	if _, err := location(s.TimeZone); err != nil {
		return err
	}
	h := s.Hours
	if (h.From == "") != (h.To == "") {
		return errors.New("hours: give both from and to (HH:MM), or neither for any time")
	}
	if h.From != "" {
		if _, err := clockMinutes("hours.from", h.From); err != nil {
			return err
		}
		if _, err := clockMinutes("hours.to", h.To); err != nil {
			return err
		}
		if h.From == h.To {
			return fmt.Errorf("hours: from and to are both %s; leave both empty for any time", h.From)
		}
	} else if len(h.Days) > 0 {
		return errors.New("hours.days: needs from and to")
	}
	for _, d := range h.Days {
		if !slices.Contains(weekdays, d) {
			return fmt.Errorf("hours.days: %q is not one of %s", d, strings.Join(weekdays, ", "))
		}
	}
	return nil
}

func location(name string) (*time.Location, error) {
	if name == "" {
		return time.Local, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Errorf("timeZone: %q is not an IANA time zone such as Europe/Berlin", name)
	}
	return loc, nil
}

func clockMinutes(field, v string) (int, error) {
	t, err := time.Parse("15:04", v)
	if err != nil || len(v) != 5 {
		return 0, fmt.Errorf("%s: %q is not a time of day HH:MM (00:00..23:59)", field, v)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// allowedAt reports whether t (in the owner's zone loc) falls in the
// window h, and describes the window for a refusal.
func allowedAt(h control.Hours, t time.Time) bool {
	if h.From == "" {
		return true
	}
	from, _ := clockMinutes("", h.From)
	to, _ := clockMinutes("", h.To)
	m := t.Hour()*60 + t.Minute()
	day := t.Weekday()
	var in bool
	if from < to {
		in = m >= from && m < to
	} else { // spans midnight: the part after midnight belongs to the day before
		in = m >= from || m < to
		if m < to {
			day = (day + 6) % 7
		}
	}
	if !in {
		return false
	}
	return len(h.Days) == 0 || slices.Contains(h.Days, weekdays[day])
}

// applyUpdate returns s with u's fields set.
func applyUpdate(s control.Settings, u control.SettingsUpdate) control.Settings {
	if u.Lending != nil {
		s.Lending = *u.Lending
	}
	if u.MaxComputers != nil {
		s.MaxComputers = *u.MaxComputers
	}
	if u.CPUs != nil {
		s.CPUs = *u.CPUs
	}
	if u.MemoryMB != nil {
		s.MemoryMB = *u.MemoryMB
	}
	if u.DailySeconds != nil {
		s.DailySeconds = *u.DailySeconds
	}
	if u.Hours != nil {
		s.Hours = *u.Hours
	}
	if u.TimeZone != nil {
		s.TimeZone = *u.TimeZone
	}
	if u.Desktop != nil {
		s.Desktop = *u.Desktop
	}
	if u.Approval != nil {
		s.Approval = *u.Approval
	}
	if u.ApprovalTimeoutSeconds != nil {
		s.ApprovalTimeoutSeconds = *u.ApprovalTimeoutSeconds
	}
	if u.Egress != nil {
		s.Egress = *u.Egress
	}
	if u.WarmPoolSize != nil {
		s.WarmPoolSize = *u.WarmPoolSize
	}
	if u.WarmPoolMax != nil {
		s.WarmPoolMax = *u.WarmPoolMax
	}
	return s
}

// loadSettings reads the settings file, or returns the defaults when there
// is none. A file that does not parse or holds values out of range is an
// error naming it: the agent does not lend on limits it cannot read.
func loadSettings(dir string) (control.Settings, error) {
	p := filepath.Join(dir, SettingsFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultSettings(), nil
	}
	if err != nil {
		return control.Settings{}, fmt.Errorf("settings: %w", err)
	}
	s := DefaultSettings()
	if err := json.Unmarshal(b, &s); err != nil {
		return control.Settings{}, fmt.Errorf("settings %s: %w", p, err)
	}
	if err := CheckSettings(s); err != nil {
		return control.Settings{}, fmt.Errorf("settings %s: %w", p, err)
	}
	return s, nil
}

// saveSettings writes the settings file (0600) atomically.
func saveSettings(dir string, s control.Settings) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".settings-*")
	if err != nil {
		return fmt.Errorf("save settings: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save settings: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save settings: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save settings: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, SettingsFile)); err != nil {
		return fmt.Errorf("save settings: %w", err)
	}
	return nil
}
