//go:build linux

package testkit

import (
	"testing"

	"github.com/berthdev/berth/internal/netnstest"
)

// RequireNetns skips t unless this process can make network namespaces
// (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN, and the ip command), and
// fails it instead under BERTH_REQUIRE_NETNS=1. run is the command that
// runs the test with what it needs.
func RequireNetns(t testing.TB, run string) {
	t.Helper()
	netnstest.Require(t, run)
}
