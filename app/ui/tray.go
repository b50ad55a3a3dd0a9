package ui

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver/desktop"

	"github.com/berthdev/berth/app/agentlink"
)

// Tray menu labels, which tests and the docs refer to.
const (
	TrayLend       = "Lend this machine"
	TrayOpen       = "Open Berth"
	TrayQuit       = "Quit"
	TrayNoSessions = "No sessions running"
)

// EnableTray puts the app's icon and menu in the system tray. Call it only
// when a tray can work (on Linux: a D-Bus session bus answers).
func (u *UI) EnableTray(d desktop.App) {
	u.tray = d
	u.trayKey = ""
	u.trayReader, _ = u.app.Driver().(trayMenuReader)
	u.setTray(agentlink.StateOf(u.lastSnap.status), u.lastSnap)
}

// TrayMenu is the tray's menu for the state last read: the lending switch,
// the running sessions, open Berth, quit.
func (u *UI) TrayMenu() *fyne.Menu {
	s := u.lastSnap
	lend := fyne.NewMenuItem(TrayLend, func() { u.SetLending(!u.lastSnap.status.Lending) })
	lend.Checked = s.status.Lending
	items := []*fyne.MenuItem{lend, fyne.NewMenuItemSeparator()}
	if len(s.sessions) == 0 {
		none := fyne.NewMenuItem(TrayNoSessions, nil)
		none.Disabled = true
		items = append(items, none)
	}
	for _, x := range s.sessions {
		items = append(items, fyne.NewMenuItem(trayLabel(x.Agent, x.Image, x.TimeLeftSeconds), func() { u.Show(TabSessions) }))
	}
	quit := fyne.NewMenuItem(TrayQuit, func() { u.opts.Quit() })
	quit.IsQuit = true
	items = append(items, fyne.NewMenuItemSeparator(), fyne.NewMenuItem(TrayOpen, func() { u.Show(TabSessions) }), quit)
	return fyne.NewMenu("Berth", items...)
}

func trayLabel(agent, image string, left int64) string {
	// Whole minutes, so the menu changes once a minute, not every second.
	return fmt.Sprintf("%s (%s): %d min left", agent, image, (left+59)/60)
}

// setTray updates the tray's icon and menu when what they show changed.
func (u *UI) setTray(st agentlink.State, s snapshot) {
	if u.tray == nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v", st, s.status.Lending)
	for _, x := range s.sessions {
		b.WriteString("|" + trayLabel(x.Agent, x.Image, x.TimeLeftSeconds))
	}
	// The tray library installs the first menu it was given once it is
	// ready, over any set before; the driver says which menu it has.
	if b.String() == u.trayKey && (u.trayReader == nil || u.trayReader.SystemTrayMenu() == u.trayMenu) {
		return
	}
	u.trayKey = b.String()
	// The tray library panics when its bus connection is gone (on quit,
	// or when the session bus ends): the window goes on without a tray.
	defer func() {
		if r := recover(); r != nil {
			u.log.Warn("system tray gone", "err", r)
			u.tray = nil
		}
	}()
	u.tray.SetSystemTrayIcon(StateIcon(st))
	u.trayMenu = u.TrayMenu()
	u.tray.SetSystemTrayMenu(u.trayMenu)
}

// trayMenuReader is the driver's view of the menu in the tray.
type trayMenuReader interface{ SystemTrayMenu() *fyne.Menu }

// DisableTray stops updating the tray; call it before the app quits.
func (u *UI) DisableTray() {
	u.tray = nil
}

var (
	iconsOnce sync.Once
	icons     map[agentlink.State]fyne.Resource
)

// stateColors are the tray icon's colours: green lending, grey paused,
// blue busy, red offline.
var stateColors = map[agentlink.State]color.NRGBA{
	agentlink.StateLending: {0x2e, 0xa0, 0x43, 0xff},
	agentlink.StatePaused:  {0x8a, 0x8f, 0x98, 0xff},
	agentlink.StateBusy:    {0x1f, 0x6f, 0xeb, 0xff},
	agentlink.StateOffline: {0xd1, 0x24, 0x2f, 0xff},
}

// StateIcon is the tray icon for a state: a 32x32 PNG drawn at start (a
// filled disc in the state's colour, with a white mark: a dot for
// lending, two bars for paused, a ring for busy, a cross for offline).
func StateIcon(st agentlink.State) fyne.Resource {
	iconsOnce.Do(func() {
		icons = map[agentlink.State]fyne.Resource{}
		for s, c := range stateColors {
			var buf bytes.Buffer
			if err := png.Encode(&buf, drawIcon(s, c, 32)); err != nil {
				panic(err) // encoding an in-memory RGBA cannot fail
			}
			icons[s] = fyne.NewStaticResource("berth-"+string(s)+".png", buf.Bytes())
		}
	})
	return icons[st]
}

func drawIcon(st agentlink.State, c color.NRGBA, n int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, n, n))
	white := color.NRGBA{0xff, 0xff, 0xff, 0xff}
	mid := float64(n-1) / 2
	r := float64(n)/2 - 1
	for y := 0; y < n; y++ {
		for x := 0; x < n; x++ {
			dx, dy := float64(x)-mid, float64(y)-mid
			d2 := dx*dx + dy*dy
			if d2 > r*r {
				continue
			}
			img.SetNRGBA(x, y, c)
			fx, fy := dx/r, dy/r
			var mark bool
			switch st {
			case agentlink.StateLending:
				mark = fx*fx+fy*fy < 0.12
			case agentlink.StatePaused:
				mark = fy > -0.45 && fy < 0.45 && ((fx > -0.38 && fx < -0.12) || (fx > 0.12 && fx < 0.38))
			case agentlink.StateBusy:
				q := fx*fx + fy*fy
				mark = q > 0.16 && q < 0.36
			case agentlink.StateOffline:
				mark = fx > -0.5 && fx < 0.5 && fy > -0.5 && fy < 0.5 && (abs(fx-fy) < 0.13 || abs(fx+fy) < 0.13)
			}
			if mark {
				img.SetNRGBA(x, y, white)
			}
		}
	}
	return img
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
