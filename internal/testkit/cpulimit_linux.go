package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LimitCPU holds process pid to cores of CPU time a second (0.25 is a
// quarter of one core), in a cgroup of its own made below this process's
// own: cgroup v1's cpu controller, or cgroup v2's. When t ends the process,
// if it still runs, goes back to this process's cgroup and the cgroup is
// removed. Where no such cgroup can be made (not root, no cpu controller),
// t is skipped, or failed under BERTH_REQUIRE_CGROUP=1.
func LimitCPU(t TB, pid int, cores float64) {
	t.Helper()
	if cores <= 0 {
		t.Fatalf("LimitCPU: cores must be above 0, got %g", cores)
		return
	}
	g, err := newCPUGroup(fmt.Sprintf("berth-cpulimit-%d-%d", os.Getpid(), pid), cores)
	if err != nil {
		Missing(t, CgroupEnv, "no CPU cgroup can be made here ("+err.Error()+")", "as root on Linux with the cpu controller: make test")
		return
	}
	if err := g.add(pid); err != nil {
		g.remove(pid)
		t.Fatalf("LimitCPU: move process %d into %s: %v", pid, g.dir, err)
		return
	}
	t.Cleanup(func() {
		if err := g.remove(pid); err != nil {
			t.Fatalf("LimitCPU: %v", err)
		}
	})
}

// cpuGroup is a cgroup that limits the CPU time of its processes.
type cpuGroup struct {
	dir    string // the cgroup's folder
	parent string // the folder of the cgroup this process is in
}

const cgroupRoot = "/sys/fs/cgroup"

// newCPUGroup makes the cgroup name below this process's own, limited to
// cores: with cgroup v1's cpu controller where it is mounted, else with
// cgroup v2's.
func newCPUGroup(name string, cores float64) (*cpuGroup, error) {
	const period = 100_000 // µs
	quota := max(int(cores*period), 1000)
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cpu", "cpu.cfs_quota_us")); err == nil {
		self, err := selfCgroup(func(controllers string) bool {
			return strings.Contains(","+controllers+",", ",cpu,")
		})
		if err != nil {
			return nil, err
		}
		g := &cpuGroup{parent: filepath.Join(cgroupRoot, "cpu", self)}
		g.dir = filepath.Join(g.parent, name)
		return g, g.make(map[string]string{"cpu.cfs_period_us": strconv.Itoa(period), "cpu.cfs_quota_us": strconv.Itoa(quota)})
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return nil, errors.New("neither cgroup v1's cpu controller nor cgroup v2 is mounted at " + cgroupRoot)
	}
	self, err := selfCgroup(func(controllers string) bool { return controllers == "" })
	if err != nil {
		return nil, err
	}
	g := &cpuGroup{parent: filepath.Join(cgroupRoot, self)}
	g.dir = filepath.Join(g.parent, name)
	sub, err := os.ReadFile(filepath.Join(g.parent, "cgroup.subtree_control"))
	if err != nil {
		return nil, err
	}
	if !strings.Contains(" "+strings.TrimSpace(string(sub))+" ", " cpu ") {
		if err := os.WriteFile(filepath.Join(g.parent, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return nil, fmt.Errorf("enable the cpu controller below %s: %w", g.parent, err)
		}
	}
	return g, g.make(map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, period)})
}

// selfCgroup returns the path of this process's cgroup in the hierarchy
// whose controllers field (the second of /proc/self/cgroup) is.
func selfCgroup(is func(controllers string) bool) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && is(parts[1]) {
			return parts[2], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("this process's cgroup is not in /proc/self/cgroup")
}

// make creates the cgroup and writes its settings; a cgroup left half
// made is removed.
func (g *cpuGroup) make(settings map[string]string) error {
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return err
	}
	for file, v := range settings {
		if err := os.WriteFile(filepath.Join(g.dir, file), []byte(v), 0); err != nil {
			os.Remove(g.dir)
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return nil
}

func (g *cpuGroup) add(pid int) error {
	return os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// remove moves pid, if it still runs, back to the parent cgroup and
// removes the cgroup, which the kernel refuses until its last process has
// left: it tries for up to five seconds.
func (g *cpuGroup) remove(pid int) error {
	err := os.WriteFile(filepath.Join(g.parent, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("move process %d out of %s: %w", pid, g.dir, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := os.Remove(g.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove %s: %w", g.dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
