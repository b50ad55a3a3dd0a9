package units

import (
	"testing"

	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
