package dockercompat

import (
	"os"

	"github.com/slopbox/slopbox/backend"
)

// rtCgroupDir is where cgroup v1's cpu controller keeps the real-time
// group scheduling files (CONFIG_RT_GROUP_SCHED); cgroup v2 has none.
// A variable for the tests.
var rtCgroupDir = "/sys/fs/cgroup/cpu"

// CheckRealtime refuses --cpu-rt-period and --cpu-rt-runtime
// (HostConfig.CpuRealtimePeriod, CpuRealtimeRuntime) before anything is
// created, for create (CreateOptions.ToSpawnSpec) and serve's update:
// with dockerd's words (runconfig's validateResources, Docker 20.10 to 25) where the host
// cannot set them, and in slopbox's where it could.
//
// Where the kernel has real-time group scheduling and slopbox runs as
// root they are still refused, not honoured. A cgroup's real-time
// runtime is taken from its parent's, and a new cgroup starts with none
// (0 µs): slopbox's parent cgroup ("slopbox") has none unless the
// operator gives it a budget, as dockerd's --cpu-rt-runtime does for its
// own parent. slopbox does not change host-wide cgroups, so the write
// would fail at start (EINVAL) after the create had been accepted; and a
// sandbox's processes lack CAP_SYS_NICE by default, which SCHED_FIFO and
// SCHED_RR need. Refused at create, nothing is created and the caller
// learns why at once.
func CheckRealtime(p, r int64) error {
	if p == 0 && r == 0 {
		return nil
	}
	if p < 0 {
		return backend.InvalidValue("invalid cpu real-time period %d: want microseconds", p)
	}
	if r < 0 {
		return backend.InvalidValue("invalid cpu real-time runtime %d: want microseconds", r)
	}
	rootless := os.Geteuid() != 0
	for _, c := range []struct {
		v          int64
		name, file string
	}{{p, "period", "cpu.rt_period_us"}, {r, "runtime", "cpu.rt_runtime_us"}} {
		if c.v == 0 {
			continue
		}
		if _, err := os.Stat(rtCgroupDir + "/" + c.file); err != nil {
			return backend.InvalidValue("Your kernel does not support CPU real-time scheduler (cpu real-time %s: no %s/%s: the kernel has no real-time group scheduling, CONFIG_RT_GROUP_SCHED, or this is cgroup v2, which has no real-time limits)", c.name, rtCgroupDir, c.file)
		}
		if rootless {
			return backend.InvalidValue("Your kernel does not support CPU real-time scheduler (cpu real-time %s, for rootless slopbox: the kernel has it, but a rootless sandbox has no cpu cgroup of its own to set it in)", c.name)
		}
	}
	if p != 0 && r != 0 && r > p {
		return backend.InvalidValue("cpu real-time runtime cannot be higher than cpu real-time period")
	}
	return backend.InvalidValue("cpu real-time period and runtime are not supported by slopbox: the cgroups above a sandbox's have no real-time budget (slopbox does not give host cgroups one, as dockerd's --cpu-rt-runtime does), and its processes have no CAP_SYS_NICE to use it by default")
}
