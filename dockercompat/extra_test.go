package dockercompat

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
)

// TestCreateOptionsExtra checks what the translator refuses of the
// settings serve acts on (restart policy, log driver, CpuShares,
// healthcheck), with dockerd's words, and the anonymous volumes of
// Config.Volumes that no other mount covers.
func TestCreateOptionsExtra(t *testing.T) {
	for _, tc := range []struct {
		o    CreateOptions
		want string
	}{
		{CreateOptions{RestartPolicy: RestartPolicy{Name: "sometimes"}}, "invalid restart policy: unknown policy 'sometimes'"},
		{CreateOptions{RestartPolicy: RestartPolicy{Name: "always", MaximumRetryCount: 2}}, "maximum retry count can only be used with 'on-failure'"},
		{CreateOptions{RestartPolicy: RestartPolicy{Name: "always"}, AutoRemove: true}, "conflicting options: cannot specify both --restart and --rm"},
		{CreateOptions{LogConfig: LogConfig{Type: "asdf"}}, "logger: no log driver named 'asdf' is registered"},
		{CreateOptions{LogConfig: LogConfig{Config: map[string]string{"max-size": "1m", "x": "y"}}}, "unknown log opt 'x' for json-file log driver"},
		{CreateOptions{CpuShares: -1}, "invalid CPU shares (-1): the minimum is 0"},
		{CreateOptions{Healthcheck: &v1.HealthConfig{Test: []string{"CMD", "true"}, Interval: time.Microsecond}}, "Interval in Healthcheck cannot be less than 1ms"},
		{CreateOptions{Healthcheck: &v1.HealthConfig{Test: []string{"true"}}}, "Healthcheck Test"},
	} {
		_, _, _, err := tc.o.ToSpawnSpec()
		if !errors.Is(err, backend.ErrInvalidValue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an invalid value saying %q", tc.o, err, tc.want)
		}
	}
	o := CreateOptions{AnonymousVolumes: []string{"/a", "/b", "/tmp/"}, Volumes: []string{"/srv:/b"}, Tmpfs: []string{"/tmp"},
		RestartPolicy: RestartPolicy{Name: "on-failure", MaximumRetryCount: 3}, LogConfig: LogConfig{Type: "none"}}
	s, _, _, err := o.ToSpawnSpec()
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.Mount{{Source: "/srv", Target: "/b", CreateMissing: true}, {Target: "/a", AnonymousVolume: true}}
	if len(s.Mounts) != 2 || s.Mounts[0] != want[0] || s.Mounts[1] != want[1] {
		t.Errorf("mounts %+v, want %+v", s.Mounts, want)
	}
}
