package imagebuild

import (
	"errors"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
)

// TestApplyChanges: the one reading of --change (commit and import), by
// BuildKit's parser as a Dockerfile's: quoted ENV values stay whole, a
// name set twice is set once, VOLUME and EXPOSE are taken, and an
// instruction that is not configuration is refused before anything
// changes (image.ApplyChanges split ENV A="b c", appended duplicates and
// had no VOLUME).
func TestApplyChanges(t *testing.T) {
	cfg := v1.Config{Env: []string{"PATH=/bin", "A=old"}}
	err := ApplyChanges(&cfg, []string{`ENV A="b c" B=d`, `ENV B e f`, `ENV C=${A}-x`, `LABEL "k 1"="v 1"`, `VOLUME /data`, `EXPOSE 80 53/udp`,
		`CMD echo hi`, `ENTRYPOINT ["/bin/tini", "--"]`, `WORKDIR /w`, `WORKDIR sub`, `USER 1000:1000`, `STOPSIGNAL SIGUSR1`})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "A=b c", "B=e f", "C=b c-x"}; !slices.Equal(cfg.Env, want) {
		t.Errorf("Env %q, want %q", cfg.Env, want)
	}
	if cfg.Labels["k 1"] != "v 1" || len(cfg.Volumes) != 1 || len(cfg.ExposedPorts) != 2 {
		t.Errorf("Labels %v Volumes %v ExposedPorts %v", cfg.Labels, cfg.Volumes, cfg.ExposedPorts)
	}
	if _, ok := cfg.ExposedPorts["80/tcp"]; !ok {
		t.Errorf("EXPOSE 80 is not 80/tcp: %v", cfg.ExposedPorts)
	}
	if !slices.Equal(cfg.Cmd, []string{"/bin/sh", "-c", "echo hi"}) || !slices.Equal(cfg.Entrypoint, []string{"/bin/tini", "--"}) {
		t.Errorf("Cmd %q Entrypoint %q", cfg.Cmd, cfg.Entrypoint)
	}
	if cfg.WorkingDir != "/w/sub" || cfg.User != "1000:1000" || cfg.StopSignal != "SIGUSR1" {
		t.Errorf("WorkingDir %q User %q StopSignal %q", cfg.WorkingDir, cfg.User, cfg.StopSignal)
	}
	before := v1.Config{Env: []string{"A=1"}}
	for _, bad := range [][]string{{"RUN true"}, {"ENV A=2", "COPY a b"}, {"FROM scratch"}, {"NOTAVERB x"}} {
		c := before
		c.Env = slices.Clone(before.Env)
		if err := ApplyChanges(&c, bad); !errors.Is(err, backend.ErrInvalidValue) || !slices.Equal(c.Env, before.Env) {
			t.Errorf("ApplyChanges(%q): %v, env %q; want an invalid value and nothing changed", bad, err, c.Env)
		}
	}
}
