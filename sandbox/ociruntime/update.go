package ociruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/utils"
	"github.com/opencontainers/runc/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ExecFlags are exec's command-line overrides of the container's process.
type ExecFlags struct {
	Cwd, User      string
	Env, Caps      []string
	AdditionalGids []uint32
	Tty            bool
}

// ExecProcess is the process `exec ID CMD…` runs, as runc builds it: the
// bundle's process (its env, cwd, user, capabilities, rlimits) with the
// command line's args and overrides. containerd always passes --process;
// a person typing exec gets what runc would give them.
func (r *Runtime) ExecProcess(id string, args []string, f ExecFlags) (*specs.Process, error) {
	c, err := r.load(id)
	if err != nil {
		return nil, err
	}
	bundle, ok := utils.SearchLabels(c.Config().Labels, "bundle")
	if !ok {
		return nil, fmt.Errorf("container %s has no bundle label: give the process with --process", id)
	}
	spec, err := LoadSpec(bundle)
	if err != nil {
		return nil, fmt.Errorf("the container's bundle: %w (give the process with --process)", err)
	}
	p := *spec.Process
	p.Args = args
	if f.Cwd != "" {
		p.Cwd = f.Cwd
	}
	p.Env = append(p.Env, f.Env...)
	p.Terminal = f.Tty
	p.ConsoleSize = nil
	if f.User != "" {
		u, g, hasGid := strings.Cut(f.User, ":")
		var uid, gid uint32
		if _, err := fmt.Sscan(u, &uid); err != nil {
			return nil, fmt.Errorf("--user %q: want UID[:GID]", f.User)
		}
		if hasGid {
			if _, err := fmt.Sscan(g, &gid); err != nil {
				return nil, fmt.Errorf("--user %q: want UID[:GID]", f.User)
			}
		}
		p.User.UID, p.User.GID = uid, gid
	}
	p.User.AdditionalGids = append(p.User.AdditionalGids, f.AdditionalGids...)
	if len(f.Caps) > 0 {
		var caps specs.LinuxCapabilities
		if p.Capabilities != nil {
			caps = *p.Capabilities
		}
		for _, c := range f.Caps {
			c = strings.ToUpper(c)
			if !strings.HasPrefix(c, "CAP_") {
				c = "CAP_" + c
			}
			caps.Bounding = append(caps.Bounding, c)
			caps.Effective = append(caps.Effective, c)
			caps.Permitted = append(caps.Permitted, c)
		}
		p.Capabilities = &caps
	}
	return &p, nil
}

// ReadResources reads update's --resources: a file, or "-" for stdin (as
// containerd's shim passes UpdateContainerResources).
func ReadResources(path string, stdin io.Reader) (*specs.LinuxResources, error) {
	in := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	var res specs.LinuxResources
	if err := json.NewDecoder(in).Decode(&res); err != nil {
		return nil, fmt.Errorf("--resources: %w", err)
	}
	return &res, nil
}

// Update changes a created, running or paused container's cgroup limits.
// Only the fields res sets change; the others keep their values.
func (r *Runtime) Update(id string, res *specs.LinuxResources) error {
	c, st, err := r.loadStatus(id)
	if err != nil {
		return err
	}
	if st == libcontainer.Stopped {
		return fmt.Errorf("container %s is stopped: nothing to update", id)
	}
	if err := hasCgroup(c); err != nil {
		return fmt.Errorf("%w: its limits cannot be changed", err)
	}
	cfg := c.Config()
	cr := cfg.Cgroups.Resources
	if m := res.Memory; m != nil {
		setI64(&cr.Memory, m.Limit)
		setI64(&cr.MemoryReservation, m.Reservation)
		setI64(&cr.MemorySwap, m.Swap)
		if m.Limit != nil && *m.Limit == -1 && m.Swap == nil {
			cr.MemorySwap = -1 // unlimited memory takes the swap limit with it
		}
		if m.CheckBeforeUpdate != nil {
			cr.MemoryCheckBeforeUpdate = *m.CheckBeforeUpdate
		}
	}
	if cpu := res.CPU; cpu != nil {
		if cpu.Shares != nil {
			cr.CpuShares = *cpu.Shares
			cr.CpuWeight = cgroups.ConvertCPUSharesToCgroupV2Value(*cpu.Shares)
		}
		setI64(&cr.CpuQuota, cpu.Quota)
		if cpu.Period != nil {
			cr.CpuPeriod = *cpu.Period
		}
		if cpu.Burst != nil {
			cr.CpuBurst = cpu.Burst
		}
		setI64(&cr.CpuRtRuntime, cpu.RealtimeRuntime)
		if cpu.RealtimePeriod != nil {
			cr.CpuRtPeriod = *cpu.RealtimePeriod
		}
		if cpu.Cpus != "" {
			cr.CpusetCpus = cpu.Cpus
		}
		if cpu.Mems != "" {
			cr.CpusetMems = cpu.Mems
		}
		if cpu.Idle != nil {
			cr.CPUIdle = cpu.Idle
		}
	}
	if p := res.Pids; p != nil && p.Limit != nil {
		cr.PidsLimit = p.Limit
	}
	if b := res.BlockIO; b != nil && b.Weight != nil {
		cr.BlkioWeight = *b.Weight
	}
	if len(res.Unified) > 0 {
		if cr.Unified == nil {
			cr.Unified = map[string]string{}
		}
		for k, v := range res.Unified {
			cr.Unified[k] = v
		}
	}
	// The device rules were set at create; rewriting them would let the
	// container's devices blink (runc skips them on update too).
	cfg.Cgroups.SkipDevices = true
	return c.Set(cfg)
}

// hasCgroup refuses a container without cgroups: rootless on cgroup v1,
// where an unprivileged user cannot create one, libcontainer runs the
// container without (its state lists paths that were never created).
func hasCgroup(c *libcontainer.Container) error {
	st, err := c.State()
	if err != nil {
		return err
	}
	cfg := c.Config()
	exists := false
	for _, p := range st.CgroupPaths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			exists = true
		}
	}
	if !exists || cfg.Cgroups == nil || cfg.Cgroups.Resources == nil {
		return fmt.Errorf("container %s has no cgroup (run rootless on a host without cgroup v2 delegation)", c.ID())
	}
	return nil
}

func setI64(dst *int64, v *int64) {
	if v != nil {
		*dst = *v
	}
}

// Events writes runc's events: one stats event and returns (once), or a
// stats event every interval until the container stops, as JSON lines.
func (r *Runtime) Events(id string, once bool, interval time.Duration, out io.Writer) error {
	if interval <= 0 {
		return errors.New("the interval must be greater than 0")
	}
	c, st, err := r.loadStatus(id)
	if err != nil {
		return err
	}
	if st == libcontainer.Stopped {
		return fmt.Errorf("container with id %s is not running", id)
	}
	if err := hasCgroup(c); err != nil {
		return fmt.Errorf("%w: there are no stats to report", err)
	}
	enc := json.NewEncoder(out)
	emit := func() error {
		s, err := c.Stats()
		if err != nil {
			return err
		}
		return enc.Encode(&types.Event{Type: "stats", ID: id, Data: convertStats(s)})
	}
	if once {
		return emit()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for range t.C {
		if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
			return nil
		}
		if err := emit(); err != nil {
			return err
		}
	}
	return nil
}

// convertStats is libcontainer's stats in runc's events shape (the shape
// go-runc's Stats reads).
func convertStats(ls *libcontainer.Stats) *types.Stats {
	var s types.Stats
	s.NetworkInterfaces = ls.Interfaces
	cg := ls.CgroupStats
	if cg == nil {
		return &s
	}
	s.Pids = types.Pids{Current: cg.PidsStats.Current, Limit: cg.PidsStats.Limit}
	u := cg.CpuStats.CpuUsage
	s.CPU.Usage = types.CpuUsage{Total: u.TotalUsage, Percpu: u.PercpuUsage, PercpuKernel: u.PercpuUsageInKernelmode,
		PercpuUser: u.PercpuUsageInUsermode, Kernel: u.UsageInKernelmode, User: u.UsageInUsermode}
	th := cg.CpuStats.ThrottlingData
	s.CPU.Throttling = types.Throttling{Periods: th.Periods, ThrottledPeriods: th.ThrottledPeriods, ThrottledTime: th.ThrottledTime}
	s.CPU.PSI = cg.CpuStats.PSI
	s.CPUSet = types.CPUSet(cg.CPUSetStats)
	m := cg.MemoryStats
	s.Memory = types.Memory{Cache: m.Cache, Usage: memEntry(m.Usage), Swap: memEntry(m.SwapUsage),
		Kernel: memEntry(m.KernelUsage), KernelTCP: memEntry(m.KernelTCPUsage), Raw: m.Stats, PSI: m.PSI}
	b := cg.BlkioStats
	s.Blkio = types.Blkio{
		IoServiceBytesRecursive: blkio(b.IoServiceBytesRecursive), IoServicedRecursive: blkio(b.IoServicedRecursive),
		IoQueuedRecursive: blkio(b.IoQueuedRecursive), IoServiceTimeRecursive: blkio(b.IoServiceTimeRecursive),
		IoWaitTimeRecursive: blkio(b.IoWaitTimeRecursive), IoMergedRecursive: blkio(b.IoMergedRecursive),
		IoTimeRecursive: blkio(b.IoTimeRecursive), SectorsRecursive: blkio(b.SectorsRecursive), PSI: b.PSI,
	}
	s.Hugetlb = map[string]types.Hugetlb{}
	for k, v := range cg.HugetlbStats {
		s.Hugetlb[k] = types.Hugetlb{Usage: v.Usage, Max: v.MaxUsage, Failcnt: v.Failcnt}
	}
	return &s
}

func memEntry(d cgroups.MemoryData) types.MemoryEntry {
	return types.MemoryEntry{Limit: d.Limit, Usage: d.Usage, Max: d.MaxUsage, Failcnt: d.Failcnt}
}

func blkio(es []cgroups.BlkioStatEntry) []types.BlkioEntry {
	out := make([]types.BlkioEntry, 0, len(es))
	for _, e := range es {
		out = append(out, types.BlkioEntry{Major: e.Major, Minor: e.Minor, Op: e.Op, Value: e.Value})
	}
	return out
}

// ResourcesFromFlags is update's flags (the ones set) as resources.
func ResourcesFromFlags(flags map[string]string) (*specs.LinuxResources, error) {
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{}, CPU: &specs.LinuxCPU{}, Pids: &specs.LinuxPids{}, BlockIO: &specs.LinuxBlockIO{}}
	bytes := func(name string, dst **int64) error {
		v := flags[name]
		if v == "" {
			return nil
		}
		n := int64(-1)
		if v != "-1" {
			var err error
			if n, err = units.RAMInBytes(v); err != nil {
				return fmt.Errorf("--%s %q: %w", name, v, err)
			}
		}
		*dst = &n
		return nil
	}
	for name, dst := range map[string]**int64{"memory": &res.Memory.Limit, "memory-swap": &res.Memory.Swap, "memory-reservation": &res.Memory.Reservation} {
		if err := bytes(name, dst); err != nil {
			return nil, err
		}
	}
	for name, dst := range map[string]**int64{"cpu-quota": &res.CPU.Quota, "pids-limit": &res.Pids.Limit} {
		if v := flags[name]; v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: want an integer", name, v)
			}
			*dst = &n
		}
	}
	for name, dst := range map[string]**uint64{"cpu-period": &res.CPU.Period, "cpu-share": &res.CPU.Shares} {
		if v := flags[name]; v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: want a non-negative integer", name, v)
			}
			*dst = &n
		}
	}
	if v := flags["blkio-weight"]; v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n < 10 || n > 1000 {
			return nil, fmt.Errorf("--blkio-weight %q: want 10 to 1000", v)
		}
		w := uint16(n)
		res.BlockIO.Weight = &w
	}
	res.CPU.Cpus, res.CPU.Mems = flags["cpuset-cpus"], flags["cpuset-mems"]
	return res, nil
}
