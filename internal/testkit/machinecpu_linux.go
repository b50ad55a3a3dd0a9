package testkit

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// MachineCPUTime is the CPU time the whole machine has spent busy so far,
// all cores together: user, nice, system, irq and softirq in /proc/stat.
// It is 0 when /proc/stat cannot be read.
func MachineCPUTime() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal guest guest_nice
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy time.Duration
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		busy += time.Duration(n) * 10 * time.Millisecond // USER_HZ is 100
	}
	return busy
}

// ProcessCPUTime is the user and system CPU time process pid has spent so
// far, all its threads, from /proc/PID/stat. It is 0 when the process is
// gone or its stat cannot be read.
func ProcessCPUTime(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: state is the first, utime the 12th and stime the 13th.
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100
}
