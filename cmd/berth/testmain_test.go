package main

import (
	"os"
	"testing"

	"github.com/berthdev/berth/internal/testkit"
)

// envRunMain makes the test binary run as berth itself, for the tests
// that need berth as a process of its own (under a pseudo-terminal).
const envRunMain = "BERTH_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		return
	}
	testkit.VerifyTestMain(m)
}
