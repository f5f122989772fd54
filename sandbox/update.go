package sandbox

import (
	"fmt"

	"github.com/opencontainers/cgroups"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/oci"
)

// Update changes the sandbox's resource limits (docker update): recorded
// for its next start, and set on its cgroup now when it runs in one. It
// reports what it could not apply now: the limits of a sandbox running
// without a cgroup (started without limits, or where the host delegates
// none) apply from its next start.
func (s *Sandbox) Update(l backend.Limits) (warnings []string, err error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	rec := s.rec
	l.TmpBytes, l.Tmpfs, l.RootfsBytes, l.Strict = rec.Limits.TmpBytes, rec.Limits.Tmpfs, rec.Limits.RootfsBytes, rec.Limits.Strict
	if rec.alive() {
		m, err := cgroupManager(rec)
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		if m == nil {
			if l.MemoryBytes > 0 || l.CPUs > 0 || l.Pids > 0 {
				warnings = append(warnings, "the sandbox runs without a cgroup: the new limits apply from its next start")
			}
		} else if err := m.Set(cgroupResources(l)); err != nil {
			return nil, fmt.Errorf("update the sandbox's cgroup: %w", err)
		}
	}
	rec.Limits = l
	if err := s.b.state.write(rec); err != nil {
		return nil, err
	}
	return warnings, nil
}

// cgroupResources are l as a running cgroup is set to them: a limit not
// set is lifted.
func cgroupResources(l backend.Limits) *cgroups.Resources {
	res := &cgroups.Resources{SkipDevices: true, Memory: -1, MemorySwap: -1, CpuPeriod: oci.CPUPeriod, CpuQuota: -1}
	if l.MemoryBytes > 0 {
		res.Memory, res.MemorySwap = l.MemoryBytes, l.MemoryBytes
	}
	if l.CPUs > 0 {
		res.CpuQuota = int64(l.CPUs * oci.CPUPeriod)
	}
	pids := int64(-1)
	if l.Pids > 0 {
		pids = l.Pids
	}
	res.PidsLimit = &pids
	return res
}
