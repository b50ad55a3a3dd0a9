package ui

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/credstore"
)

// settingsView edits the owner's limits, pairs the machine, and turns
// start at login and the system service on and off.
type settingsView struct {
	u      *UI
	loaded atomic.Bool // read by Refresh off the UI goroutine
	cur    control.Settings

	maxComputers *widget.Entry
	cpus         *widget.Entry
	memoryMB     *widget.Entry
	dailyMinutes *widget.Entry
	hoursFrom    *widget.Entry
	hoursTo      *widget.Entry
	days         *widget.Entry
	timeZone     *widget.Entry
	desktop      *widget.Check
	approval     *widget.Check
	approvalSecs *widget.Entry
	save         *widget.Button
	saved        *widget.Label

	pairedAs *widget.Label
	pairURL  *widget.Entry
	pairCode *widget.Entry
	pairName *widget.Entry
	pair     *widget.Button
	pairOut  *widget.Label

	where      *widget.Label
	autostart  *widget.Check
	service    *widget.Button
	serviceOut *widget.Label
	installed  *bool
	autoBusy   bool

	content fyne.CanvasObject
}

func newSettingsView(u *UI) *settingsView {
	v := &settingsView{u: u}
	entry := func(placeholder string) *widget.Entry {
		e := widget.NewEntry()
		e.SetPlaceHolder(placeholder)
		return e
	}
	v.maxComputers = entry("1 to 64")
	v.cpus = entry("for example 1 or 0.5")
	v.memoryMB = entry("256 to 65536")
	v.dailyMinutes = entry("1 to 1440")
	v.hoursFrom = entry("HH:MM, empty for any time")
	v.hoursTo = entry("HH:MM, empty for any time")
	v.days = entry("mon, tue, ... empty for every day")
	v.timeZone = entry("for example Europe/Berlin, empty for this machine's")
	v.desktop = widget.NewCheck("Allow desktop computers (with a screen)", nil)
	v.approval = widget.NewCheck("Ask me before each session starts", nil)
	v.approvalSecs = entry("10 to 3600")
	v.saved = widget.NewLabel("")
	v.saved.Wrapping = fyne.TextWrapWord
	v.save = widget.NewButton("Save limits", v.saveLimits)
	v.save.Importance = widget.HighImportance
	v.save.Disable()
	limits := widget.NewForm(
		widget.NewFormItem("Computers at once", v.maxComputers),
		widget.NewFormItem("CPUs per computer", v.cpus),
		widget.NewFormItem("Memory per computer (MB)", v.memoryMB),
		widget.NewFormItem("Daily lending budget (minutes)", v.dailyMinutes),
		widget.NewFormItem("Lend from", v.hoursFrom),
		widget.NewFormItem("Lend until", v.hoursTo),
		widget.NewFormItem("Lend on days", v.days),
		widget.NewFormItem("Time zone", v.timeZone),
		widget.NewFormItem("Desktop", v.desktop),
		widget.NewFormItem("Approval", v.approval),
		widget.NewFormItem("Deny unanswered requests after (seconds)", v.approvalSecs),
	)

	v.pairedAs = widget.NewLabel("Not paired with a supervisor.")
	v.pairedAs.Wrapping = fyne.TextWrapWord
	v.pairURL = entry("https://berth.example.com")
	v.pairCode = entry("ABCD-EFGH-JK")
	v.pairName = entry("optional: this machine's name")
	v.pairOut = widget.NewLabel("")
	v.pairOut.Wrapping = fyne.TextWrapWord
	v.pair = widget.NewButton("Pair this machine", v.pairNow)
	if u.opts.Pair == nil {
		v.pair.Disable()
		v.pairOut.SetText("Pairing is done by the system service's owner: run berth agent pair.")
	}
	pairing := widget.NewForm(
		widget.NewFormItem("Supervisor URL", v.pairURL),
		widget.NewFormItem("Pairing code", v.pairCode),
		widget.NewFormItem("Machine name", v.pairName),
	)

	v.where = widget.NewLabel("Agent: " + u.opts.Where)
	v.autostart = widget.NewCheck("Start Berth when I log in", v.setAutostart)
	if u.opts.Autostart == nil {
		v.autostart.Disable()
	} else {
		v.autoBusy = true
		v.autostart.SetChecked(u.opts.Autostart.Enabled())
		v.autoBusy = false
	}
	v.serviceOut = widget.NewLabel("")
	v.serviceOut.Wrapping = fyne.TextWrapWord
	v.service = widget.NewButton("Install the system service", v.toggleService)
	v.service.Disable()
	if u.opts.Service == nil {
		v.serviceOut.SetText("Installing the system service is not available here.")
	}

	bold := func(s string) *widget.Label {
		return widget.NewLabelWithStyle(s, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	}
	v.content = container.NewVScroll(container.NewVBox(
		bold("Limits"), limits, container.NewHBox(v.save), v.saved,
		widget.NewSeparator(),
		bold("Pairing"), v.pairedAs, pairing, container.NewHBox(v.pair), v.pairOut,
		widget.NewSeparator(),
		bold("This computer"), v.where, v.autostart, container.NewHBox(v.service), v.serviceOut,
	))
	return v
}

// load fills the limits form from s.
func (v *settingsView) load(s control.Settings) {
	v.cur = s
	v.loaded.Store(true)
	v.maxComputers.SetText(strconv.Itoa(s.MaxComputers))
	v.cpus.SetText(strconv.FormatFloat(s.CPUs, 'f', -1, 64))
	v.memoryMB.SetText(strconv.FormatInt(s.MemoryMB, 10))
	v.dailyMinutes.SetText(strconv.FormatInt((s.DailySeconds+59)/60, 10))
	v.hoursFrom.SetText(s.Hours.From)
	v.hoursTo.SetText(s.Hours.To)
	v.days.SetText(strings.Join(s.Hours.Days, ", "))
	v.timeZone.SetText(s.TimeZone)
	v.desktop.SetChecked(s.Desktop)
	v.approval.SetChecked(s.Approval)
	v.approvalSecs.SetText(strconv.Itoa(s.ApprovalTimeoutSeconds))
	v.save.Enable()
}

// applyStatus shows the pairing and, once, whether the service is
// installed.
func (v *settingsView) applyStatus(s control.Status) {
	if s.Supervisor.Paired {
		v.pairedAs.SetText(fmt.Sprintf("Paired as companion %s with %s.", s.Supervisor.LenderID, s.Supervisor.URL))
	} else {
		v.pairedAs.SetText("Not paired with a supervisor.")
	}
	if v.u.opts.Service != nil && v.installed == nil {
		v.checkService()
	}
}

// form reads the limits form; a field that does not parse is named.
func (v *settingsView) form() (control.Settings, error) {
	s := v.cur
	var err error
	whole := func(name string, e *widget.Entry) int64 {
		if err != nil {
			return 0
		}
		n, perr := strconv.ParseInt(strings.TrimSpace(e.Text), 10, 64)
		if perr != nil {
			err = fmt.Errorf("%s: %q is not a whole number", name, e.Text)
		}
		return n
	}
	s.MaxComputers = int(whole("Computers at once", v.maxComputers))
	if err == nil {
		s.CPUs, err = strconv.ParseFloat(strings.TrimSpace(v.cpus.Text), 64)
		if err != nil {
			err = fmt.Errorf("CPUs per computer: %q is not a number", v.cpus.Text)
		}
	}
	s.MemoryMB = whole("Memory per computer", v.memoryMB)
	minutes := whole("Daily lending budget", v.dailyMinutes)
	if err == nil && (minutes < 1 || minutes > 1440) {
		err = fmt.Errorf("daily lending budget: %d minutes is outside 1..1440", minutes)
	}
	s.DailySeconds = minutes * 60
	s.Hours.From = strings.TrimSpace(v.hoursFrom.Text)
	s.Hours.To = strings.TrimSpace(v.hoursTo.Text)
	s.Hours.Days = nil
	for _, d := range strings.FieldsFunc(v.days.Text, func(r rune) bool { return r == ',' || r == ' ' }) {
		s.Hours.Days = append(s.Hours.Days, strings.ToLower(d))
	}
	s.TimeZone = strings.TrimSpace(v.timeZone.Text)
	s.Desktop = v.desktop.Checked
	s.Approval = v.approval.Checked
	s.ApprovalTimeoutSeconds = int(whole("Deny unanswered requests after", v.approvalSecs))
	// The lending switch is the header's; keep what the agent has now.
	s.Lending = v.u.lastSnap.status.Lending
	return s, err
}

func (v *settingsView) saveLimits() {
	s, err := v.form()
	if err != nil {
		v.saved.SetText("Not saved: " + err.Error())
		return
	}
	v.save.Disable()
	v.saved.SetText("Saving…")
	var got control.Settings
	v.u.act("save limits", func(ctx context.Context) (string, error) {
		var err error
		got, err = v.u.agent.SetSettings(ctx, s)
		return "", err
	}, func(_ string, err error) {
		v.save.Enable()
		if err != nil {
			v.saved.SetText("Not saved: " + errText(err))
			return
		}
		v.load(got)
		v.saved.SetText("Saved.")
	})
}

func (v *settingsView) pairNow() {
	addr, code, name := v.pairURL.Text, v.pairCode.Text, v.pairName.Text
	v.pair.Disable()
	v.pairOut.SetText("Pairing…")
	v.u.act("pair", func(ctx context.Context) (string, error) {
		p, err := v.u.opts.Pair(ctx, addr, code, name)
		if err != nil {
			return "", err
		}
		kept := "the system keyring"
		if p.StoredIn == credstore.InFile {
			kept = "an encrypted file (no system keyring here)"
		}
		return fmt.Sprintf("Paired as companion %s with %s. Its token is kept in %s.", p.LenderID, p.SupervisorURL, kept), nil
	}, func(msg string, err error) {
		v.pair.Enable()
		if err != nil {
			v.pairOut.SetText("Pairing failed: " + errText(err))
			return
		}
		v.pairCode.SetText("")
		v.pairOut.SetText(msg)
	})
}

func (v *settingsView) setAutostart(on bool) {
	if v.autoBusy {
		return
	}
	if err := v.u.opts.Autostart.SetEnabled(on); err != nil {
		v.serviceOut.SetText("Could not change start at login: " + err.Error())
		v.autoBusy = true
		v.autostart.SetChecked(!on)
		v.autoBusy = false
	}
}

func (v *settingsView) checkService() {
	installed := false
	v.installed = &installed
	v.u.act("check service", func(ctx context.Context) (string, error) {
		ok, err := v.u.opts.Service.Installed(ctx)
		installed = ok
		return "", err
	}, func(_ string, err error) {
		if err != nil {
			v.serviceOut.SetText("Could not tell whether the system service is installed: " + err.Error())
		}
		v.showService(installed)
	})
}

func (v *settingsView) showService(installed bool) {
	v.installed = &installed
	v.service.Enable()
	if installed {
		v.service.SetText("Remove the system service")
	} else {
		v.service.SetText("Install the system service")
	}
}

func (v *settingsView) toggleService() {
	remove := v.installed != nil && *v.installed
	v.service.Disable()
	v.serviceOut.SetText("Working…")
	v.u.act("system service", func(ctx context.Context) (string, error) {
		if remove {
			return "The system service is removed; this app runs the agent itself.", v.u.opts.Service.Remove(ctx)
		}
		return "The system service is installed; it lends this machine even when nobody is logged in.", v.u.opts.Service.Install(ctx)
	}, func(msg string, err error) {
		if err != nil {
			v.serviceOut.SetText("System service: " + err.Error())
			v.showService(remove)
			return
		}
		v.serviceOut.SetText(msg)
		v.showService(!remove)
	})
}
