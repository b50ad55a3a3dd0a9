//go:build unix

package browser

import (
	"os/exec"
	"syscall"
)

// newProcessGroup makes cmd the leader of a process group of its own, so
// that signalGroup reaches its children too.
func newProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signalGroup sends sig to the process group that cmd leads.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) { syscall.Kill(-cmd.Process.Pid, sig) }
