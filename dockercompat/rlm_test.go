package dockercompat

import (
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

// The example from rlm_code's own test (reference §3.5).
const rlmExample = `
project: demo
sandbox:
  runtime: docker
  default_timeout_seconds: 15
  memory_limit_mb: 1024
  allowed_mount_roots: [".", "/tmp"]
  env_allowlist: ["HTTP_PROXY"]
  docker: {image: python:3.11-alpine, memory_limit_mb: 768, cpus: 2, network_enabled: false, extra_args: ["--init"]}
`

func TestRLMConfigArgv(t *testing.T) {
	if !IsRLMConfig([]byte(rlmExample)) || IsRLMConfig([]byte("type: docker\ndocker: {image: x}\n")) {
		t.Fatal("IsRLMConfig tells the formats apart wrongly")
	}
	c, err := ParseRLMConfig([]byte(rlmExample))
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultTimeoutSeconds != 15 || c.Docker.Image != "python:3.11-alpine" {
		t.Errorf("decoded %+v", c)
	}
	env := c.Env(func(k string) (string, bool) {
		if k == "HTTP_PROXY" {
			return "http://proxy:3128\r\n", true
		}
		return "", false
	})
	argv, err := c.DockerArgv("/tmp/wd", env, []string{"python", "/workspace/x.py"})
	if err != nil {
		t.Fatal(err)
	}
	// rlm_code's DockerSandboxRuntime.execute, token for token.
	want := []string{"run", "--rm", "--workdir", "/workspace", "--volume", "/tmp/wd:/workspace:rw",
		"--env", "HOME=/tmp", "--env", "HTTP_PROXY=http://proxy:3128", "--env", "PYTHONPATH=", "--env", "PYTHONUNBUFFERED=1", "--env", "TMPDIR=/tmp",
		"--network", "none", "--memory", "768m", "--cpus", "2.0", "--init", "python:3.11-alpine", "python", "/workspace/x.py"}
	if !slices.Equal(argv, want) {
		t.Errorf("argv\n got %q\nwant %q", argv, want)
	}

	// Defaults: image, 512m (a configured 0 too), cpus 1.0.
	c, err = ParseRLMConfig([]byte("sandbox:\n  docker: {memory_limit_mb: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	argv, _ = c.DockerArgv("/w", nil, []string{"true"})
	if s := strings.Join(argv, " "); s != "run --rm --workdir /workspace --volume /w:/workspace:rw --network none --memory 512m --cpus 1.0 python:3.11-slim true" {
		t.Errorf("defaults: %s", s)
	}
	if c.DefaultTimeoutSeconds != 30 {
		t.Errorf("default timeout %v, want 30", c.DefaultTimeoutSeconds)
	}
	// --network host in extra_args is refused on the parsed command line
	// (env run: TestRLMConfigReview).
	c.Docker.NetworkEnabled = true
	c.Docker.ExtraArgs = nil
	if argv, err := c.DockerArgv("/w", nil, nil); err != nil || !strings.Contains(strings.Join(argv, " "), "--network bridge --memory") {
		t.Errorf("network_enabled: %q, %v", argv, err)
	}
}

func TestRLMConfigRefused(t *testing.T) {
	for _, c := range []struct{ yaml, msg string }{
		{"sandbox:\n  docker: {imag: x}\n", `unknown key "sandbox.docker.imag"`},
		{"sandbox:\n  timeout: 3\n", `unknown key "sandbox.timeout"`},
		{"sandbox:\n  runtime: modal\n", `sandbox.runtime is "modal"`},
		{"sandbox:\n  docker: {extra_args: notalist}\n", "sandbox"},
		{"sandbox:\n  default_timeout_seconds: -1\n", "must not be negative"},
		{"other: 1\n", "no sandbox: block"},
	} {
		if _, err := ParseRLMConfig([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.msg)
		}
	}
}

func TestPolicyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.yaml")
	os.WriteFile(p, []byte("allowed_mount_roots: [work, /srv/data/]\nallow_unsafe: [cap-add=NET_ADMIN]\n"), 0o644)
	pol, err := LoadPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pol.AllowedMountRoots, []string{filepath.Join(dir, "work"), "/srv/data"}) || !slices.Equal(pol.AllowUnsafe, []string{"cap-add=NET_ADMIN"}) {
		t.Errorf("policy %+v", pol)
	}
	os.WriteFile(p, []byte("allowed_roots: [/x]\n"), 0o644)
	if _, err := LoadPolicy(p); err == nil || !strings.Contains(err.Error(), `unknown key "allowed_roots"`) || !strings.Contains(err.Error(), "allowed_mount_roots, allow_unsafe") {
		t.Errorf("unknown policy key: %v", err)
	}
	// An rlm_code config is a policy: its roots (its own directory when empty: below).
	os.WriteFile(p, []byte(rlmExample), 0o644)
	if pol, err = LoadPolicy(p); err != nil || !slices.Equal(pol.AllowedMountRoots, []string{dir, "/tmp"}) {
		t.Errorf("rlm config as policy: %+v %v", pol, err)
	}
	// Its defaults: its own directory, not rlm_code's /tmp and the rest.
	os.WriteFile(p, []byte("sandbox: {runtime: docker}\n"), 0o644)
	if pol, err = LoadPolicy(p); err != nil || !slices.Equal(pol.AllowedMountRoots, []string{dir}) {
		t.Errorf("rlm defaults as policy: %+v %v", pol, err)
	}
	// In a world-writable directory it has none: refused, not unbounded.
	os.Chmod(dir, 0o1777)
	if pol, err = LoadPolicy(p); !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), "sandbox.allowed_mount_roots") {
		t.Errorf("rlm defaults as policy in a sticky directory: %+v %v", pol, err)
	}
	os.Chmod(dir, 0o700)
	os.WriteFile(p, []byte("allow_volumes: true\n"), 0o644)
	if pol, err = LoadPolicy(p); err != nil || !pol.AllowVolumes {
		t.Errorf("allow_volumes: %+v %v", pol, err)
	}
}

// A config's allowed_mount_roots narrow the operator's, never widen them:
// allowed_mount_roots [/] under an operator's [/srv/work] is /srv/work.
func TestNarrowRoots(t *testing.T) {
	for _, c := range []struct{ operator, config, want []string }{
		{nil, []string{"/"}, []string{"/"}},
		{[]string{"/srv/work"}, []string{"/"}, []string{"/srv/work"}},
		{[]string{"/srv/work", "/tmp"}, []string{"/srv/work/a", "/home"}, []string{"/srv/work/a"}},
		{[]string{"/srv/work"}, []string{"/srv/workshop", "/srv"}, []string{"/srv/work"}},
		{[]string{"/srv/work"}, []string{"/home"}, nil},
		{[]string{"/"}, []string{"/x/", "/y"}, []string{"/x", "/y"}},
	} {
		if got := NarrowRoots(c.operator, c.config); !slices.Equal(got, c.want) {
			t.Errorf("NarrowRoots(%q, %q) = %q, want %q", c.operator, c.config, got, c.want)
		}
	}
}

// Issue 41 case 2: a config's default mount roots were rlm_code's, /tmp
// and macOS's temporary directories included, so a config could mount
// /tmp/tmux-0 or ssh-agent's directory with no one allowing it. They are
// the config's directory and the workspace; without a policy file a
// config's own allowed_mount_roots are narrowed to those, and what else it
// mounts is the operator's to allow (the policy file's roots).
func TestRLMRoots(t *testing.T) {
	proj := filepath.Join(t.TempDir(), "proj")
	os.Mkdir(proj, 0o755)
	cfg := func(roots ...string) *RLMSandbox {
		return &RLMSandbox{AllowedMountRoots: roots, Dir: proj}
	}
	// The config's directory is a root only when it is a project's own
	// (issue 41, review case 2): not / or a directory anyone may write to
	// (/tmp: the config there mounted all of it), not $HOME or above it
	// ($HOME/.ssh). Then the workspace alone.
	home := t.TempDir()
	t.Setenv("HOME", home)
	os.Mkdir(filepath.Join(home, "proj"), 0o755)
	sticky := t.TempDir()
	os.Chmod(sticky, 0o1777)
	open := t.TempDir()
	os.Chmod(open, 0o777)
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{proj, []string{proj, "/tmp/job/wd"}},
		{filepath.Join(home, "proj"), []string{filepath.Join(home, "proj"), "/tmp/job/wd"}},
		{home, []string{"/tmp/job/wd"}},
		{filepath.Dir(home), []string{"/tmp/job/wd"}},
		{"/", []string{"/tmp/job/wd"}},
		{sticky, []string{"/tmp/job/wd"}},
		{open, []string{"/tmp/job/wd"}},
	} {
		c2 := &RLMSandbox{Dir: c.dir}
		got, err := c2.Roots(nil, "/tmp/job/wd")
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("a config in %s: roots %q, %v; want %q", c.dir, got, err, c.want)
		}
		if got, err := c2.MountRoots("/tmp/job/wd"); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("a config in %s: its default roots %q, %v; want %q", c.dir, got, err, c.want)
		}
	}
	// allowed_mount_roots [.] in /tmp narrow the workspace, no more.
	if got, _ := (&RLMSandbox{Dir: sticky, AllowedMountRoots: []string{"."}}).Roots(nil, filepath.Join(sticky, "wd")); !slices.Equal(got, []string{filepath.Join(sticky, "wd")}) {
		t.Errorf("allowed_mount_roots [.] in a sticky directory: %q", got)
	}
	for _, c := range []struct {
		config   *RLMSandbox
		operator []string
		want     []string
	}{
		{cfg(), nil, []string{proj, "/tmp/job/wd"}},
		{cfg(".", "/tmp"), nil, []string{proj, "/tmp/job/wd"}},
		{cfg("/"), nil, []string{proj, "/tmp/job/wd"}},
		{cfg("/tmp/tmux-0"), nil, nil},
		{cfg("data"), nil, []string{proj + "/data"}},
		{cfg(), []string{"/srv"}, nil},
		{cfg(".", "/tmp"), []string{"/tmp"}, []string{proj, "/tmp"}},
		{cfg(".", "/srv"), []string{filepath.Dir(proj), "/tmp/job"}, []string{proj}},
	} {
		got, err := c.config.Roots(c.operator, "/tmp/job/wd")
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("allowed_mount_roots %q under the operator's %q: %q, %v; want %q", c.config.AllowedMountRoots, c.operator, got, err, c.want)
		}
	}
}

// The command line of a config's run (KeepOwnersOutside: the operator's
// workspace) keeps the owners of every bind source but the workspace and
// what lies in it: -v, --mount and --volumes-from alike; volumes are
// slopbox's own.
func TestKeepOwnersOutside(t *testing.T) {
	o := CreateOptions{Image: "i", Workdir: "/workspace", KeepOwnersOutside: "/w",
		Volumes: []string{"/w:/workspace:rw", "/tmp/tmux-0:/t:ro", "/w/sub:/s", "/wx:/wx", "cache:/c"},
		Mounts:  []MountOption{{Type: "bind", Source: "/srv/x", Target: "/m"}},
		Echoed:  Echoed{VolumesFrom: []string{"other"}},
		Lookup: func(string) (Container, error) {
			return Container{Mounts: []backend.Mount{{Source: "/home/u/ws", Target: "/from"}}}, nil
		}}
	want := map[string]bool{"/workspace": false, "/t": true, "/s": false, "/wx": true, "/c": false, "/m": true, "/from": true}
	for _, keep := range []bool{true, false} {
		if !keep {
			o.KeepOwnersOutside = ""
		}
		s, _, _, err := o.ToSpawnSpec()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Mounts) != len(want) {
			t.Fatalf("mounts %+v", s.Mounts)
		}
		for _, m := range s.Mounts {
			if m.KeepOwners != (keep && want[m.Target]) {
				t.Errorf("KeepOwnersOutside %q: %s from %q keeps its owners: %v", o.KeepOwnersOutside, m.Target, cmp.Or(m.Source, m.Volume), m.KeepOwners)
			}
		}
	}
}

// Under a policy file, a spec's type: local, network: host and
// include_os_env are refused, naming the key and the flag that allow each;
// with no policy file they are allowed, as upstream.
func TestPolicyCheckSpec(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.yaml")
	os.WriteFile(p, []byte("allowed_mount_roots: [/srv]\n"), 0o644)
	pol, err := LoadPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		yaml, key, flag string
		allow           SpecAllowances
	}{
		{"type: local\nname: l\n", "allow_local", "--allow-local", SpecAllowances{Local: true}},
		{"type: docker\nname: d\ndocker: {image: x, network: host}\n", "allow_host_network", "--allow-host-network", SpecAllowances{HostNetwork: true}},
		{"type: docker\nname: d\ndocker: {image: x}\nenvironment: {include_os_env: true}\n", "allow_os_env", "--allow-os-env", SpecAllowances{OSEnv: true}},
	} {
		s, err := ParseSpec([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		sp, err := s.SpawnSpec(SpawnOptions{Workspace: "/srv/ws"})
		if err != nil {
			t.Fatal(err)
		}
		err = pol.CheckSpec(s, sp, SpecAllowances{})
		if !errors.Is(err, backend.ErrUnsafe) || !strings.Contains(err.Error(), c.key+": true") || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q under a policy file: %v, want a refusal naming %s and %s", c.yaml, err, c.key, c.flag)
		}
		if err := pol.CheckSpec(s, sp, c.allow); err != nil {
			t.Errorf("%q with %s: %v", c.yaml, c.flag, err)
		}
		if err := (*Policy)(nil).CheckSpec(s, sp, SpecAllowances{}); err != nil {
			t.Errorf("%q with no policy file: %v", c.yaml, err)
		}
		os.WriteFile(p, []byte(c.key+": true\n"), 0o644)
		allowing, err := LoadPolicy(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := allowing.CheckSpec(s, sp, SpecAllowances{}); err != nil {
			t.Errorf("%q with %s: true: %v", c.yaml, c.key, err)
		}
		os.WriteFile(p, []byte("allowed_mount_roots: [/srv]\n"), 0o644)
	}
	// A bridge spec without include_os_env needs nothing.
	s, _ := ParseSpec([]byte("type: docker\nname: d\ndocker: {image: x}\n"))
	sp, _ := s.SpawnSpec(SpawnOptions{Workspace: "/srv/ws"})
	if err := pol.CheckSpec(s, sp, SpecAllowances{}); err != nil {
		t.Errorf("a plain spec under a policy file: %v", err)
	}
}
