//go:build !linux

package testkit

import "time"

// MachineCPUTime is 0 where /proc/stat does not exist.
func MachineCPUTime() time.Duration { return 0 }

// ProcessCPUTime is 0 where /proc does not exist.
func ProcessCPUTime(pid int) time.Duration { return 0 }
