// Package autostart starts the companion app when its user logs in. On
// Linux and the BSDs it writes an XDG autostart entry
// ($XDG_CONFIG_HOME/autostart/dev.berth.companion.desktop, by default
// under ~/.config). On macOS the same is done with a LaunchAgent, and on
// Windows with a shortcut in the Startup folder; both are described in
// docs/companion.md and not written by this package, which answers
// ErrUnsupported there.
package autostart

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ErrUnsupported is returned where this package cannot set start at login.
var ErrUnsupported = errors.New("autostart: start at login is set by the installer on this system")

// FileName is the autostart entry's name.
const FileName = "dev.berth.companion.desktop"

// Entry is the companion's start-at-login setting for one user.
type Entry struct {
	// Path is the autostart file.
	Path string
	// Exec is the command line the session starts.
	Exec []string
}

// New returns the entry for the current user that starts exec with args.
func New(exec string, args ...string) (*Entry, error) {
	switch runtime.GOOS {
	case "linux", "freebsd", "openbsd", "netbsd":
	default:
		return nil, ErrUnsupported
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("autostart: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return &Entry{Path: filepath.Join(dir, "autostart", FileName), Exec: append([]string{exec}, args...)}, nil
}

// Enabled reports whether the entry is in place.
func (e *Entry) Enabled() bool {
	_, err := os.Stat(e.Path)
	return err == nil
}

// SetEnabled writes or removes the entry.
func (e *Entry) SetEnabled(on bool) error {
	if !on {
		if err := os.Remove(e.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("autostart: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(e.Path), 0o755); err != nil {
		return fmt.Errorf("autostart: %w", err)
	}
	tmp := e.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(e.Desktop()), 0o644); err != nil {
		return fmt.Errorf("autostart: %w", err)
	}
	if err := os.Rename(tmp, e.Path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("autostart: %w", err)
	}
	return nil
}

// Desktop is the entry's text, a freedesktop.org desktop entry.
func (e *Entry) Desktop() string {
	args := make([]string, len(e.Exec))
	for i, a := range e.Exec {
		args[i] = quote(a)
	}
	return "[Desktop Entry]\n" +
		"Type=Application\n" +
		"Name=Berth\n" +
		"Comment=Lend this computer to AI agents\n" +
		"Exec=" + strings.Join(args, " ") + "\n" +
		"Icon=dev.berth.companion\n" +
		"Terminal=false\n" +
		"Categories=Utility;\n" +
		"X-GNOME-Autostart-enabled=true\n"
}

// quote quotes an Exec argument as the desktop entry spec asks: inside
// double quotes, with ", `, $ and \ escaped; % doubled.
func quote(a string) string {
	a = strings.ReplaceAll(a, "%", "%%")
	if a != "" && !strings.ContainsAny(a, " \t\n\"'\\><~|&;$*?#()`") {
		return a
	}
	r := strings.NewReplacer(`\`, `\\\\`, `"`, `\\"`, "`", "\\\\`", `$`, `\\$`)
	return `"` + r.Replace(a) + `"`
}
