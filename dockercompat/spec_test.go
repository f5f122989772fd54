package dockercompat

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

// The specs SlopCodeBench ships (reference §1.15).
const uvSpec = `type: docker
name: python3.12            # -> runtime image "slop-code:python3.12"
docker: {image: ghcr.io/astral-sh/uv:python3.12-trixie-slim, workdir: /workspace, mount_workspace: true}
environment:
  env: {UV_CACHE_DIR: /tmp/uv-cache, PIP_CACHE_DIR: /tmp/pip-cache-dir, PIP_CONFIG_FILE: /tmp/pip-conf}
setup:
  eval_commands: ["uv init", "uv add -r requirements.txt"]
  resume_commands: ["python -m venv .venv || true", ".venv/bin/pip install -r requirements.txt 2>/dev/null || true"]
commands: {entry_file: "{entry_file}.py", command: uv run, agent_command: "python"}
`

const localSpec = `type: local
name: python
environment: {include_os_env: true}
setup:
  eval_commands: ["uv init", "uv add -r requirements.txt"]
commands: {entry_file: "{entry_file}.py", command: uv run, agent_command: "python"}
`

const fullSpec = `type: docker
name: myenv
docker:
  image: python:3.12-slim
  binary: docker
  workdir: /workspace
  mount_workspace: true
  extra_mounts:
    ./data: /data
    /abs/cache: {bind: /cache, mode: rw}
  network: none
  user: "1000:1000"
  keep_container_after_clean: true
environment: {env: {K: V}, include_os_env: false}
setup: {commands: [a], eval_commands: [b], resume_commands: [c]}
commands: {entry_file: "{entry_file}.py", command: python, agent_command: null}
snapshot:
  keep_globs: null
  ignore_globs: ["*.pyc", "venv/*", ".venv/*", ".evaluation_tests/*"]
  compression: xz
  archive_save_dir: null
`

func TestShippedSpecs(t *testing.T) {
	s, err := ParseSpec([]byte(uvSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Docker.Image != "ghcr.io/astral-sh/uv:python3.12-trixie-slim" || s.Docker.Binary != "docker" || !*s.Docker.MountWorkspace ||
		s.Environment.Env["UV_CACHE_DIR"] != "/tmp/uv-cache" || s.Snapshot.Compression != "gz" || len(s.Snapshot.IgnoreGlobs) != 4 {
		t.Errorf("uv spec: %+v %+v", s, s.Docker)
	}
	if got := s.SetupCommands(false); len(got) != 0 {
		t.Errorf("agent setup: %q", got)
	}
	if got := s.SetupCommands(true); !slices.Equal(got, []string{"uv init", "uv add -r requirements.txt"}) {
		t.Errorf("evaluation setup: %q", got)
	}
	for _, c := range []struct {
		agent bool
		want  string
	}{{false, "uv run main.py"}, {true, "python main.py"}} {
		if got, err := s.Command("main", c.agent); err != nil || got != c.want {
			t.Errorf("command (agent %v): %q %v, want %q", c.agent, got, err, c.want)
		}
	}
	l, err := ParseSpec([]byte(localSpec))
	if err != nil {
		t.Fatal(err)
	}
	if l.Type != "local" || !l.Environment.IncludeOSEnv || l.Docker != nil {
		t.Errorf("local spec: %+v", l)
	}
}

func TestFullSpecToSpawnSpec(t *testing.T) {
	s, err := ParseSpec([]byte(fullSpec))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := s.SpawnSpec(SpawnOptions{Workspace: "/ws", Evaluation: true, AgentUser: "5:5",
		Assets: []StaticAsset{{Name: "tests", Source: "/assets/t", SavePath: "tests/data", IsDir: true}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.Mount{{Source: "./data", Target: "/data", ReadOnly: true}, {Source: "/abs/cache", Target: "/cache"}}
	if !slices.Equal(sp.Mounts, want) {
		t.Errorf("mounts %+v, want %+v", sp.Mounts, want)
	}
	if sp.Image != "python:3.12-slim" || sp.User != "1000:1000" || sp.Network != "none" || !sp.Keep || sp.Context != backend.ContextEvaluation ||
		sp.Workdir != "/workspace" || sp.NoWorkspaceMount || sp.SpecEnv["K"] != "V" || !slices.Equal(sp.Setup.EvalCommands, []string{"b"}) ||
		len(sp.StaticAssets) != 1 || sp.StaticAssets[0].SavePath != "tests/data" {
		t.Errorf("spawn spec: %+v", sp)
	}
	if s.Snapshot.Compression != "xz" || s.Snapshot.KeepGlobs != nil {
		t.Errorf("snapshot: %+v", s.Snapshot)
	}
	if got := s.IgnoreGlobs([]StaticAsset{{SavePath: "tests/data", IsDir: true}}); !slices.Contains(got, "tests/assets/*") || !slices.Contains(got, "tests/data/*") {
		t.Errorf("ignore globs: %q", got)
	}
	// No network key: SlopCodeBench's bridge; --image overrides the image.
	s2, _ := ParseSpec([]byte(uvSpec))
	if sp, _ := s2.SpawnSpec(SpawnOptions{Image: "local/py:1"}); sp.Network != backend.NetworkBridge || sp.Image != "local/py:1" || sp.Context != backend.ContextAgent {
		t.Errorf("defaults: %+v", sp)
	}
}

// Every invalid spec gets a clear message; an unknown key is named with
// the keys that are valid where it stands.
func TestInvalidSpecs(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"type: docker\nname: x\ndocker: {image: i}\nbogus: 1\n", `unknown key "bogus" (line 4); valid keys are: type, name, docker`},
		{"type: docker\nname: x\ndocker: {image: i, docker_binary: d}\n", `unknown key "docker.docker_binary"`},
		{"type: docker\nname: x\ndocker: {image: i}\nsetup: {command: [a]}\n", `valid keys in setup are: commands, eval_commands, resume_commands`},
		{"type: docker\nname: x\ndocker: {image: i, extra_mounts: {a: {bind: /b, mod: rw}}}\n", `unknown key "docker.extra_mounts.a.mod"`},
		{"type: docker\nname: x\ndocker: {image: i, extra_mounts: {a: {bind: /b, mode: rwx}}}\n", `mode "rwx": use ro or rw`},
		{"type: docker\nname: x\ndocker: {image: i, extra_mounts: {a: b}}\n", `must be an absolute container path`},
		{"type: docker\nname: x\n", "a docker spec needs docker.image"},
		{"type: docker\ndocker: {image: i}\n", "name is required"},
		{"name: x\n", "type is required"},
		{"type: kubernetes\nname: x\n", `unknown type "kubernetes"`},
		{"type: local\nname: x\nsnapshot: {compression: zip}\n", `compression "zip"`},
		{"type: local\nname: x\nsetup: [a]\n", "setup must be a mapping"},
		{"- a\n- b\n", "the spec must be a mapping"},
		{"", "empty"},
		{"type: docker\nname: x\ndocker: {image: i, mount_workspace: maybe}\n", "invalid environment spec"},
	} {
		_, err := ParseSpec([]byte(c.spec))
		if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want ErrBadSpec saying %q", c.spec, err, c.want)
		}
	}
}

func TestFormatEntryFile(t *testing.T) {
	for _, c := range []struct{ tmpl, want, err string }{
		{"{entry_file}.py", "main.py", ""},
		{"{entry_file}", "main", ""},
		{"run_{{x}}_{entry_file}", "run_{x}_main", ""},
		{"{other}.py", "", "only {entry_file}"},
		{"{}", "", "only {entry_file}"},
	} {
		s := &Spec{Commands: Commands{EntryFile: c.tmpl}}
		got, err := s.FormatEntryFile("main")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %q %v, want an error", c.tmpl, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %q %v, want %q", c.tmpl, got, err, c.want)
		}
	}
	s := &Spec{Commands: Commands{EntryFile: "{entry_file}"}}
	if _, err := s.FormatEntryFile(""); err == nil {
		t.Error("an empty entry file was accepted")
	}
}

// FuzzParseSpec: any bytes are parsed or refused with ErrBadSpec, never a
// panic, and a spec that parses converts.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{uvSpec, localSpec, fullSpec, "type: docker\nname: x\ndocker: {image: i, extra_mounts: {a: {bind: /b}}}\n", "{", "- x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			if !errors.Is(err, ErrBadSpec) {
				t.Fatalf("error without ErrBadSpec: %v", err)
			}
			return
		}
		if _, err := s.SpawnSpec(SpawnOptions{Workspace: "/ws"}); err != nil {
			t.Fatalf("a valid spec does not convert: %v", err)
		}
		s.Command("main", true)
		s.IgnoreGlobs(nil)
	})
}

func TestResolvePlaceholders(t *testing.T) {
	assets := []StaticAsset{{Name: "data", Source: "/host/assets/data", SavePath: "tests/data"}}
	for _, c := range []struct {
		in        string
		sandboxed bool
		want, err string
	}{
		{"cat {{static:data}}/x", true, "cat /static/tests/data/x", ""},
		{"cat {{static:data}}/x {{static:data}}", false, "cat /host/assets/data/x /host/assets/data", ""},
		{"no placeholder {{", true, "no placeholder {{", ""},
		{"{{static:nope}}", true, "", "unknown static asset placeholder: nope"},
	} {
		got, err := ResolvePlaceholders(c.in, assets, c.sandboxed)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %q %v", c.in, got, err)
			}
		} else if err != nil || got != c.want {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
}
