package relayserver_test

import (
	"os"
	"testing"

	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperAgents())
	}
	testkit.VerifyTestMain(m)
}
