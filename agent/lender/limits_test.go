package lender

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/lending"
)

// TestOwnerLimits checks that every owner limit refuses a start with its
// own code, status and message, before anything reaches Docker.
func TestOwnerLimits(t *testing.T) {
	cases := []struct {
		name    string
		set     func(*control.Settings)
		req     func(*lending.CreateRequest)
		prepare func(r *rig)
		code    string
		status  int
		message string
	}{
		{name: "paused", set: func(s *control.Settings) { s.Lending = false },
			code: lending.CodePaused, status: http.StatusServiceUnavailable, message: "lending is paused by the machine's owner"},
		{name: "hours", set: func(s *control.Settings) { s.Hours = control.Hours{From: "18:00", To: "23:00"} },
			code: lending.CodeHours, status: 422, message: "from 18:00 to 23:00 (every day, Europe/Berlin); it is Mon 10:00 there now"},
		{name: "weekdays", set: func(s *control.Settings) {
			s.Hours = control.Hours{From: "08:00", To: "18:00", Days: []string{"sat", "sun"}}
		},
			code: lending.CodeHours, status: 422, message: "from 08:00 to 18:00 (sat, sun, Europe/Berlin)"},
		{name: "desktop", set: func(s *control.Settings) { s.Desktop = false }, req: func(c *lending.CreateRequest) { c.Image = "desktop" },
			code: lending.CodeDesktop, status: 422, message: "allows no desktop computers"},
		{name: "cpu", set: func(s *control.Settings) { s.CPUs = 1 }, req: func(c *lending.CreateRequest) { c.CPUs = 2 },
			code: lending.CodeCPU, status: 422, message: "cpus: 2 asked, the owner allows at most 1 per computer"},
		{name: "memory", req: func(c *lending.CreateRequest) { c.MemoryMB = 4096 },
			code: lending.CodeMemory, status: 422, message: "memoryMB: 4096 asked, the owner allows at most 256 MB per computer"},
		{name: "count", set: func(s *control.Settings) { s.MaxComputers = 1 },
			prepare: func(r *rig) { r.l.starting["other"] = reservation{lease: time.Minute, day: "2026-11-30"} },
			code:    lending.CodeTooMany, status: 422, message: "at most 1 computers at once on this machine; 1 are running or starting"},
		{name: "budget", set: func(s *control.Settings) { s.DailySeconds = 3600 },
			prepare: func(r *rig) {
				// 3000 s lent earlier today (Berlin time) leave 600 s, less than the lease.
				ctx := context.Background()
				start := monday10.Add(-2 * time.Hour)
				s := ledger.Session{ComputerID: "old", SessionID: "s", AttemptID: "a", Agent: "x", Workspace: "w", Image: "headless",
					Deployment: "d", Day: "2026-11-30", StartedAt: start, ExpiresAt: start.Add(time.Hour)}
				if err := r.led.Begin(ctx, s); err != nil {
					r.t.Fatal(err)
				}
				r.led.End(ctx, "old", start.Add(3000*time.Second), "stopped")
			},
			code: lending.CodeBudget, status: 422, message: "daily lending budget: 600 s of 3600 s left today (2026-11-30), this session needs 900 s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "cp_limits", "", nil)
			r.set(tc.set)
			if tc.prepare != nil {
				tc.prepare(r)
			}
			req, _ := request("agent-1")
			if tc.req != nil {
				tc.req(&req)
			}
			_, err := r.l.Create(testContext(t, 30*time.Second), req)
			var e *lending.Error
			if !errors.As(err, &e) {
				t.Fatalf("create: %v, want a refusal %s", err, tc.code)
			}
			if e.Code != tc.code || e.Status != tc.status || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("refusal %d %s %q, want %d %s containing %q", e.Status, e.Code, e.Message, tc.status, tc.code, tc.message)
			}
			if n := len(r.l.Computers()); n != 0 {
				t.Fatalf("%d computers after a refusal", n)
			}
		})
	}
}

// TestApprovalTimesOut: in approval mode a start waits for the owner and is
// refused once the timeout passes on the (fake) clock; a denial is 403.
func TestApprovalTimesOut(t *testing.T) {
	r := newRig(t, "cp_approval", "", nil)
	r.set(func(s *control.Settings) { s.Approval, s.ApprovalTimeoutSeconds = true, 60 })
	ctx := testContext(t, 30*time.Second)

	waitPending := func() control.Approval {
		t.Helper()
		var as []control.Approval
		testkit.EventuallyContext(t, ctx, "an approval asked", func() bool { as = r.l.Approvals(); return len(as) == 1 })
		return as[0]
	}

	req, _ := request("agent-1")
	errc := make(chan error, 1)
	go func() { _, err := r.l.Create(ctx, req); errc <- err }()
	a := waitPending()
	if a.Agent != "agent-1" || a.Workspace != "ws-test" || !a.Deadline.Equal(monday10.Add(time.Minute)) || a.State != control.ApprovalPending {
		t.Fatalf("approval %+v", a)
	}
	r.clk.Advance(59 * time.Second)
	select {
	case err := <-errc:
		t.Fatalf("refused before the deadline: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.clk.Advance(time.Second)
	err := <-errc
	var e *lending.Error
	if !errors.As(err, &e) || e.Code != lending.CodeApprovalTimeout || e.Status != http.StatusServiceUnavailable ||
		!strings.Contains(e.Message, "did not approve the session within 60 s") {
		t.Fatalf("after the deadline: %v", err)
	}
	if as := r.l.Approvals(); len(as) != 0 {
		t.Fatalf("approvals left: %+v", as)
	}
	if _, err := r.l.Decide(a.ID, true); !errors.As(err, &e) || e.Code != lending.CodeNotFound {
		t.Fatalf("approve after timeout: %v", err)
	}

	req2, _ := request("agent-2")
	go func() { _, err := r.l.Create(ctx, req2); errc <- err }()
	a = waitPending()
	if d, err := r.l.Decide(a.ID, false); err != nil || d.State != control.ApprovalDenied {
		t.Fatalf("deny: %+v %v", d, err)
	}
	if err := <-errc; !errors.As(err, &e) || e.Code != lending.CodeDenied || e.Status != http.StatusForbidden {
		t.Fatalf("denied start: %v", err)
	}
	// The slot held while waiting is free again.
	if n := len(r.l.starting); n != 0 {
		t.Fatalf("%d reservations left", n)
	}
}

// TestSettingsCheckedAndKept: a value out of range is refused naming the
// field, nothing changes; good settings survive a restart.
func TestSettingsCheckedAndKept(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, "cp_settings", dir, nil)
	bad := []struct {
		u    control.SettingsUpdate
		want string
	}{
		{control.SettingsUpdate{MaxComputers: ptr(0)}, "maxComputers: 0 is outside 1..64"},
		{control.SettingsUpdate{CPUs: ptr(100.0)}, "cpus: 100 is outside 0.1..64"},
		{control.SettingsUpdate{MemoryMB: ptr(int64(10))}, "memoryMB: 10 is outside 256..65536"},
		{control.SettingsUpdate{DailySeconds: ptr(int64(90000))}, "dailySeconds: 90000 is outside 60..86400"},
		{control.SettingsUpdate{TimeZone: ptr("Mars/Olympus")}, `timeZone: "Mars/Olympus" is not an IANA time zone`},
		{control.SettingsUpdate{Hours: &control.Hours{From: "25:00", To: "06:00"}}, `hours.from: "25:00" is not a time of day`},
		{control.SettingsUpdate{Hours: &control.Hours{From: "09:00"}}, "hours: give both from and to"},
		{control.SettingsUpdate{Hours: &control.Hours{From: "09:00", To: "17:00", Days: []string{"monday"}}}, `hours.days: "monday" is not one of`},
		{control.SettingsUpdate{ApprovalTimeoutSeconds: ptr(5)}, "approvalTimeoutSeconds: 5 is outside 10..3600"},
		{control.SettingsUpdate{WarmPoolSize: ptr(3)}, "warmPoolSize: 3 is outside 0..2 (waiting computers count toward maxComputers)"},
		{control.SettingsUpdate{WarmPoolSize: ptr(-1)}, "warmPoolSize: -1 is outside 0..2"},
		{control.SettingsUpdate{WarmPoolMax: ptr(3)}, "warmPoolMax: 3 is outside 0..2"},
		{control.SettingsUpdate{WarmPoolSize: ptr(2), WarmPoolMax: ptr(1)}, "warmPoolMax: 1 is outside 2..2 (at least warmPoolSize"},
	}
	before := r.l.Settings()
	for _, b := range bad {
		_, err := r.l.UpdateSettings(b.u)
		var e *lending.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, b.want) {
			t.Errorf("update %+v: %v, want 400 %q", b.u, err, b.want)
		}
	}
	if got := r.l.Settings(); !equalSettings(got, before) {
		t.Fatalf("settings changed by refused updates: %+v", got)
	}
	if !before.Egress || before.WarmPoolSize != 0 {
		t.Fatalf("defaults: egress %v, warm pool %d; want on and 0", before.Egress, before.WarmPoolSize)
	}
	want, err := r.l.UpdateSettings(control.SettingsUpdate{Lending: ptr(false), MaxComputers: ptr(3), Hours: &control.Hours{From: "22:00", To: "06:00"},
		TimeZone: ptr("Asia/Tokyo"), Approval: ptr(true), Egress: ptr(false), WarmPoolSize: ptr(1), WarmPoolMax: ptr(3)})
	if err != nil {
		t.Fatal(err)
	}
	r.l.Close()
	r2 := newRig(t, "cp_settings", dir, nil)
	if got := r2.l.Settings(); !equalSettings(got, want) {
		t.Fatalf("after restart %+v, want %+v", got, want)
	}
}

func equalSettings(a, b control.Settings) bool {
	return a.Lending == b.Lending && a.MaxComputers == b.MaxComputers && a.CPUs == b.CPUs && a.MemoryMB == b.MemoryMB &&
		a.DailySeconds == b.DailySeconds && a.Hours.From == b.Hours.From && a.Hours.To == b.Hours.To &&
		strings.Join(a.Hours.Days, ",") == strings.Join(b.Hours.Days, ",") && a.TimeZone == b.TimeZone &&
		a.Desktop == b.Desktop && a.Approval == b.Approval && a.ApprovalTimeoutSeconds == b.ApprovalTimeoutSeconds &&
		a.Egress == b.Egress && a.WarmPoolSize == b.WarmPoolSize && a.WarmPoolMax == b.WarmPoolMax
}

func ptr[T any](v T) *T { return &v }

// TestAllowedHours covers windows that span midnight and weekdays.
func TestAllowedHours(t *testing.T) {
	berlin, _ := location("Europe/Berlin")
	at := func(day, hhmm string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", day+" "+hhmm, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	night := control.Hours{From: "22:00", To: "06:00", Days: []string{"fri"}}
	for _, c := range []struct {
		h    control.Hours
		t    time.Time
		want bool
	}{
		{control.Hours{}, at("2026-11-30", "03:00"), true},
		{control.Hours{From: "09:00", To: "17:00"}, at("2026-11-30", "09:00"), true},
		{control.Hours{From: "09:00", To: "17:00"}, at("2026-11-30", "17:00"), false},
		{night, at("2026-12-04", "23:30"), true},  // Friday night
		{night, at("2026-12-05", "05:59"), true},  // Saturday morning, Friday's window
		{night, at("2026-12-05", "23:00"), false}, // Saturday night
		{night, at("2026-12-04", "05:00"), false}, // Friday morning is Thursday's window
	} {
		if got := allowedAt(c.h, c.t); got != c.want {
			t.Errorf("allowedAt(%+v, %s) = %v, want %v", c.h, c.t.Format("Mon 15:04"), got, c.want)
		}
	}
}
