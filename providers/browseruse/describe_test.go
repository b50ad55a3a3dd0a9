package browseruse

import (
	"testing"

	"github.com/berthdev/berth/conformance/hostedtest"
)

// TestDescribed checks what `berth providers` shows for the provider: a
// summary, and the setting or credential a connection cannot do without,
// marked required with help (and secret when it is a key).
func TestDescribed(t *testing.T) { hostedtest.RequireDescribed(t, ID, CredAPIKey, true) }
