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
