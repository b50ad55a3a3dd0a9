package dbusprobe

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func TestNoBus(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	if Address() != "" && !strings.HasPrefix(Address(), "unix:path=/run/user/") {
		t.Fatalf("Address() = %q with no bus set", Address())
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "none"))
	if err := SessionBus(t.Context(), 2*time.Second); err == nil {
		t.Fatal("SessionBus answered nil with no bus at the address")
	}
}

// TestRealBus starts a real session bus (dbus-daemon) and asks it.
func TestRealBus(t *testing.T) {
	testkit.RequireTools(t, "apt-get install -y dbus", "dbus-daemon")
	sock := filepath.Join(t.TempDir(), "bus")
	cmd := exec.Command("dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1", "--address=unix:path="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", strings.TrimSpace(line))
	if err := SessionBus(t.Context(), 5*time.Second); err != nil {
		t.Fatalf("SessionBus: %v", err)
	}
}
