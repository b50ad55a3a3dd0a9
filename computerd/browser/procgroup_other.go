//go:build !unix

package browser

import (
	"os/exec"
	"syscall"
)

// newProcessGroup does nothing here: there are no process groups to make.
func newProcessGroup(*exec.Cmd) {}

// signalGroup kills cmd's process (whatever sig): without process groups,
// its children are not reached.
func signalGroup(cmd *exec.Cmd, _ syscall.Signal) { cmd.Process.Kill() }
