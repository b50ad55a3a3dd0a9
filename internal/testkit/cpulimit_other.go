//go:build !linux

package testkit

// LimitCPU needs Linux's cgroups: elsewhere t is skipped, or failed under
// BERTH_REQUIRE_CGROUP=1.
func LimitCPU(t TB, pid int, cores float64) {
	t.Helper()
	Missing(t, CgroupEnv, "CPU limits need Linux's cgroups", "on Linux, as root: make test")
}
