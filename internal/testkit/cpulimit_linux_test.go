package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLimitCPU holds a busy shell loop to a fifth of a core and reads its
// CPU time from /proc over a second: it may use little more than 0.2 s of
// it, and must use some. Once the limit's test has ended, the loop is back
// in this process's cgroup and the limit's cgroup is gone.
func TestLimitCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	var limited string
	t.Run("limited", func(t *testing.T) {
		LimitCPU(t, pid, 0.2)
		limited = cpuCgroupOf(t, pid)
		if !strings.Contains(limited, "berth-cpulimit-") {
			t.Fatalf("the loop's cgroup is %q, not the limit's", limited)
		}
		const window = time.Second
		before := ProcessCPUTime(pid)
		time.Sleep(window) // the span the loop's CPU time is measured over
		used := ProcessCPUTime(pid) - before
		// The quota is enforced per 100 ms period; a tick of /proc's
		// clock (10 ms) either side is rounding.
		if most := time.Duration(0.2*float64(window)) + 30*time.Millisecond; used > most {
			t.Errorf("the loop used %v of CPU in %v, limited to 0.2 of a core (at most %v)", used, window, most)
		}
		if used <= 0 {
			t.Errorf("the loop used no CPU in %v", window)
		}
		// The kernel says it held the loop back.
		stat, err := os.ReadFile(filepath.Join(cgroupRoot, "cpu", limited, "cpu.stat"))
		if err != nil {
			stat, err = os.ReadFile(filepath.Join(cgroupRoot, limited, "cpu.stat"))
		}
		if err != nil || strings.Contains(string(stat), "nr_throttled 0\n") || !strings.Contains(string(stat), "nr_throttled ") {
			t.Errorf("the limit's cpu.stat does not show the loop throttled: %q %v", stat, err)
		}
	})
	if limited == "" {
		return // skipped or failed above
	}
	if now := cpuCgroupOf(t, pid); now == limited {
		t.Errorf("the loop is still in %s after the limit's test", now)
	}
	for _, dir := range []string{filepath.Join(cgroupRoot, "cpu", limited), filepath.Join(cgroupRoot, limited)} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the limit's cgroup %s is still there (%v)", dir, err)
		}
	}
}

// cpuCgroupOf returns the path of pid's cgroup for the cpu controller (v1)
// or its only one (v2).
func cpuCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if strings.Contains(","+parts[1]+",", ",cpu,") {
			return parts[2]
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	return v2
}
