package autostart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnableDisable(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	e, err := New("/opt/Berth Companion/berth-companion", "--hidden")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "autostart", FileName); e.Path != want {
		t.Errorf("path = %s, want %s", e.Path, want)
	}
	if e.Enabled() {
		t.Fatal("enabled before SetEnabled")
	}
	if err := e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(e.Path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, line := range []string{"[Desktop Entry]", "Type=Application", "Name=Berth",
		`Exec="/opt/Berth Companion/berth-companion" --hidden`, "X-GNOME-Autostart-enabled=true"} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("entry lacks %q:\n%s", line, text)
		}
	}
	if !e.Enabled() {
		t.Error("not enabled after SetEnabled(true)")
	}
	if err := e.SetEnabled(false); err != nil {
		t.Fatal(err)
	}
	if e.Enabled() {
		t.Error("still enabled after SetEnabled(false)")
	}
	if err := e.SetEnabled(false); err != nil {
		t.Errorf("disabling twice: %v", err)
	}
	if _, err := os.Stat(e.Path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temp file left: %v", err)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/berth-companion": "/usr/bin/berth-companion",
		"/a b/c":                   `"/a b/c"`,
		`/x"y`:                     `"/x\\"y"`,
		"/p$q":                     `"/p\\$q"`,
		"100%":                     "100%%",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
