package daemon_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/supervisor/daemon"
)

// TestSandboxRuntimeNotOnEngine: a SANDBOX_RUNTIME the engine does not
// list stops the supervisor at start, with an error that names the setting
// and the runtimes the engine has.
func TestSandboxRuntimeNotOnEngine(t *testing.T) {
	testkit.RequireDocker(t)
	o := daemon.Options{
		DataDir: t.TempDir(), Token: "runtime-test-operator-token-0123456789",
		Providers: []string{docker.ID}, DefaultProvider: docker.ID,
		Getenv: func(k string) string {
			switch k {
			case docker.SettingRuntime:
				return "berth-no-such-runtime"
			case docker.SettingNetworkPool:
				return "0"
			}
			return ""
		},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Egress: daemon.EgressOptions{Listen: "off"},
	}
	d, err := daemon.New(testContext(t), o)
	if err == nil {
		d.Close()
		t.Fatal("the supervisor started with a runtime the engine does not have")
	}
	for _, want := range []string{`SANDBOX_RUNTIME="berth-no-such-runtime"`, "it has ", "runc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
