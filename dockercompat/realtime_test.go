package dockercompat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

// TestCheckRealtime: --cpu-rt-period and --cpu-rt-runtime are refused
// at create, with dockerd's words where the host has no real-time group
// scheduling (no cpu.rt_* files: a kernel without CONFIG_RT_GROUP_SCHED,
// or cgroup v2) or the caller is rootless, dockerd's for a runtime above
// the period, and slopbox's where root could set them. The host's files
// are stood in for by a directory of the test's own.
func TestCheckRealtime(t *testing.T) {
	old := rtCgroupDir
	t.Cleanup(func() { rtCgroupDir = old })
	none, both := t.TempDir(), t.TempDir()
	for _, f := range []string{"cpu.rt_period_us", "cpu.rt_runtime_us"} {
		if err := os.WriteFile(filepath.Join(both, f), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rootless := os.Geteuid() != 0
	for _, tc := range []struct {
		dir                string
		period, runtime    int64
		want, wantRootless string
	}{
		{none, 0, 0, "", ""},
		{both, 0, 0, "", ""},
		{none, 1000, 500, "Your kernel does not support CPU real-time scheduler (cpu real-time period: no ", ""},
		{none, 0, 500, "Your kernel does not support CPU real-time scheduler (cpu real-time runtime: no ", ""},
		{none, -1, 0, "invalid cpu real-time period -1", ""},
		{both, 1000, 500, "cpu real-time period and runtime are not supported by slopbox", "Your kernel does not support CPU real-time scheduler (cpu real-time period, for rootless slopbox"},
		{both, 0, 500, "cpu real-time period and runtime are not supported by slopbox", "Your kernel does not support CPU real-time scheduler (cpu real-time runtime, for rootless slopbox"},
		{both, 500, 1000, "cpu real-time runtime cannot be higher than cpu real-time period", "Your kernel does not support CPU real-time scheduler (cpu real-time period, for rootless slopbox"},
	} {
		rtCgroupDir = tc.dir
		want := tc.want
		if rootless && tc.wantRootless != "" {
			want = tc.wantRootless
		}
		o := CreateOptions{Image: "img", CPURealtimePeriod: tc.period, CPURealtimeRuntime: tc.runtime}
		_, _, _, err := o.ToSpawnSpec()
		if want == "" {
			if err != nil {
				t.Errorf("period %d runtime %d: %v", tc.period, tc.runtime, err)
			}
			continue
		}
		if !errors.Is(err, backend.ErrInvalidValue) || !strings.Contains(err.Error(), want) {
			t.Errorf("period %d runtime %d (rt files: %v): %v, want an invalid value saying %q", tc.period, tc.runtime, tc.dir == both, err, want)
		}
	}
}
