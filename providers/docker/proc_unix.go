//go:build unix

package docker

import "syscall"

// processGone reports whether no process of this machine has id pid.
func processGone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }
