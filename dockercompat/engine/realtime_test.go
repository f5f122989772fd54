package engine

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestCreateRefusesCPURealtime: docker-py's cpu_rt_period and
// cpu_rt_runtime (HostConfig.CpuRealtimePeriod, CpuRealtimeRuntime) are
// refused by create with 400 and nothing is created, where serve used to
// take them and show 0 in inspect. On this cgroup v1 host the kernel has
// real-time group scheduling: as root slopbox's refusal (it gives
// sandboxes no real-time budget), and a runtime above the period gets
// dockerd's words; rootless, dockerd's "Your kernel does not support"
// with why. Without the cpu.rt_* files (no CONFIG_RT_GROUP_SCHED, or
// cgroup v2) dockerd's words alone (dockercompat's TestCheckRealtime).
// An update asking for them is refused the same way.
func TestCreateRefusesCPURealtime(t *testing.T) {
	_, c, ref := testServer(t)
	_, statErr := os.Stat("/sys/fs/cgroup/cpu/cpu.rt_runtime_us")
	rootless := os.Geteuid() != 0
	want := func(rootlessWant, rootWant string) string {
		switch {
		case statErr != nil:
			return "Your kernel does not support CPU real-time scheduler"
		case rootless:
			return rootlessWant
		}
		return rootWant
	}
	for _, tc := range []struct {
		hc   map[string]any
		want string
	}{
		// docker-py's test_create_with_cpu_rt_options.
		{map[string]any{"CpuRealtimePeriod": 1000, "CpuRealtimeRuntime": 500},
			want("Your kernel does not support CPU real-time scheduler (cpu real-time period, for rootless slopbox", "cpu real-time period and runtime are not supported by slopbox")},
		{map[string]any{"CpuRealtimeRuntime": 500},
			want("Your kernel does not support CPU real-time scheduler (cpu real-time runtime, for rootless slopbox", "cpu real-time period and runtime are not supported by slopbox")},
		{map[string]any{"CpuRealtimePeriod": 500, "CpuRealtimeRuntime": 1000},
			want("Your kernel does not support CPU real-time scheduler (cpu real-time period, for rootless slopbox", "cpu real-time runtime cannot be higher than cpu real-time period")},
	} {
		code, out := call(t, c, "POST", "/containers/create?name=rt", map[string]any{"Image": ref, "Cmd": []string{"true"}, "HostConfig": tc.hc})
		var e struct{ Message string }
		json.Unmarshal(out, &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Message, tc.want) {
			t.Errorf("create with %v: %d %s, want 400 saying %q", tc.hc, code, out, tc.want)
		}
		code, out = call(t, c, "GET", "/containers/json?all=1", nil)
		var list []any
		if err := json.Unmarshal(out, &list); code != http.StatusOK || err != nil || len(list) != 0 {
			t.Fatalf("after the refused create: %d %s, want no container", code, out)
		}
	}
	// Nothing asked for: created, and inspect shows 0 (what dockerd shows).
	if code, out := call(t, c, "POST", "/containers/create?name=rt", map[string]any{"Image": ref, "Cmd": []string{"true"}}); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	code, out := call(t, c, "GET", "/containers/rt/json", nil)
	var insp struct{ HostConfig map[string]any }
	if err := json.Unmarshal(out, &insp); code != http.StatusOK || err != nil {
		t.Fatalf("inspect: %d %s", code, out)
	}
	if p, r := insp.HostConfig["CpuRealtimePeriod"], insp.HostConfig["CpuRealtimeRuntime"]; p != 0.0 || r != 0.0 {
		t.Errorf("inspect: CpuRealtimePeriod %v, CpuRealtimeRuntime %v, want 0", p, r)
	}
	code, out = call(t, c, "POST", "/containers/rt/update", map[string]any{"CpuRealtimePeriod": 1000, "CpuRealtimeRuntime": 500})
	if code != http.StatusBadRequest || !strings.Contains(string(out), "real-time") {
		t.Errorf("update with real-time values: %d %s, want 400", code, out)
	}
}
