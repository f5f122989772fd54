package dockercompat

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RLMSandbox is the `sandbox:` block of an rlm_code config (rlm_config.yaml,
// reference §3.5), as far as its docker runtime and its policy go.
type RLMSandbox struct {
	Runtime               string    `yaml:"runtime"`
	DefaultTimeoutSeconds float64   `yaml:"default_timeout_seconds"`
	MemoryLimitMB         int       `yaml:"memory_limit_mb"`
	AllowedMountRoots     []string  `yaml:"allowed_mount_roots"`
	EnvAllowlist          []string  `yaml:"env_allowlist"`
	Docker                RLMDocker `yaml:"docker"`

	// Dir is the directory of the config file: relative allowed roots
	// resolve against it (rlm_code's project root).
	Dir string `yaml:"-"`
}

// RLMDocker is sandbox.docker.
type RLMDocker struct {
	Image          string   `yaml:"image"`
	MemoryLimitMB  *int     `yaml:"memory_limit_mb"`
	CPUs           *float64 `yaml:"cpus"`
	NetworkEnabled bool     `yaml:"network_enabled"`
	ExtraArgs      []string `yaml:"extra_args"`
}

// rlm_code's SandboxConfig default image. Its default mount roots (".",
// /tmp, /var/folders, /private/tmp, /private/var/folders) are not
// slopbox's: see MountRoots.
var rlmDefaultImage = "python:3.11-slim"

// rlmSandboxKeys are the keys rlm_code's SandboxConfig knows; those of other
// runtimes (apple, monty, superbox, pure_rlm) are accepted and not used.
var rlmSandboxKeys = []string{"runtime", "default_timeout_seconds", "memory_limit_mb", "allowed_mount_roots", "env_allowlist",
	"docker", "apple", "apple_container_enabled", "superbox_profile", "superbox_auto_fallback", "superbox_fallback_runtimes",
	"pure_rlm_backend", "pure_rlm_allow_unsafe_exec", "pure_rlm_strict", "monty_type_check", "monty_max_allocations",
	"monty_max_memory", "monty_max_output_chars"}

var rlmDockerKeys = []string{"image", "memory_limit_mb", "cpus", "network_enabled", "extra_args"}

// IsRLMConfig reports whether data is an rlm_code config: a mapping with a
// top-level sandbox: block (a SlopCodeBench spec has none).
func IsRLMConfig(data []byte) bool {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return false
	}
	return field(root.Content[0], "sandbox") != nil
}

// LoadRLMConfig reads the sandbox block of the rlm_code config in file.
func LoadRLMConfig(file string) (*RLMSandbox, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c, err := ParseRLMConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	c.Dir = filepath.Dir(abs)
	if real, err := filepath.EvalSymlinks(c.Dir); err == nil {
		c.Dir = real // the roots are compared with real paths
	}
	return c, nil
}

// ParseRLMConfig decodes the sandbox block of an rlm_code config. Keys of
// other top-level sections are rlm_code's business and are not read; an
// unknown key in sandbox or sandbox.docker is refused with the valid ones.
func ParseRLMConfig(data []byte) (*RLMSandbox, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%w: empty config", ErrBadSpec)
	}
	sb := field(root.Content[0], "sandbox")
	if sb == nil {
		return nil, fmt.Errorf("%w: no sandbox: block (an rlm_code config has one)", ErrBadSpec)
	}
	if err := checkKeyList(sb, "sandbox", rlmSandboxKeys); err != nil {
		return nil, err
	}
	if d := field(sb, "docker"); d != nil {
		if err := checkKeyList(d, "sandbox.docker", rlmDockerKeys); err != nil {
			return nil, err
		}
	}
	c := &RLMSandbox{Runtime: "docker", DefaultTimeoutSeconds: 30, MemoryLimitMB: 512}
	if err := sb.Decode(c); err != nil {
		return nil, fmt.Errorf("%w: sandbox: %v", ErrBadSpec, err)
	}
	switch rt := strings.ToLower(strings.TrimSpace(c.Runtime)); rt {
	case "docker", "":
		c.Runtime = "docker"
	default:
		return nil, fmt.Errorf("%w: sandbox.runtime is %q; slopbox runs the docker runtime (set runtime: docker)", ErrBadSpec, c.Runtime)
	}
	if c.Docker.Image == "" {
		c.Docker.Image = rlmDefaultImage
	}
	if c.DefaultTimeoutSeconds < 0 {
		return nil, fmt.Errorf("%w: sandbox.default_timeout_seconds %v must not be negative", ErrBadSpec, c.DefaultTimeoutSeconds)
	}
	return c, nil
}

// checkKeyList refuses a key of mapping n not in valid.
func checkKeyList(n *yaml.Node, where string, valid []string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%w: %s must be a mapping (line %d)", ErrBadSpec, cmp.Or(where, "the file"), n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(valid, k) {
			if where == "" {
				return fmt.Errorf("%w: unknown key %q (line %d); valid keys are: %s", ErrBadSpec, k, n.Content[i].Line, strings.Join(valid, ", "))
			}
			return fmt.Errorf("%w: unknown key %q (line %d); valid keys in %s are: %s", ErrBadSpec, where+"."+k, n.Content[i].Line, where, strings.Join(valid, ", "))
		}
	}
	return nil
}

// MountRoots are the config's allowed mount roots, absolute: relative ones
// (and ~) resolved as rlm_code does, against the config's directory. With
// none configured they are the config's own directory (when DirRoot
// allows it) and the workspace (when given), not rlm_code's defaults,
// which add /tmp and macOS's temporary directories as a whole: there
// other programs keep sockets and secrets (/tmp/tmux-0, ssh-agent's
// /tmp/ssh-*) that a config must not reach unless the operator allows it
// (Roots).
func (c *RLMSandbox) MountRoots(workspace string) ([]string, error) {
	roots := c.AllowedMountRoots
	if len(roots) == 0 {
		roots = c.defaultRoots(workspace)
	}
	out := make([]string, 0, len(roots))
	for _, r := range roots {
		if r == "~" || strings.HasPrefix(r, "~/") {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("sandbox.allowed_mount_roots %q: %w", r, err)
			}
			r = filepath.Join(home, strings.TrimPrefix(r, "~"))
		}
		if !filepath.IsAbs(r) {
			r = filepath.Join(c.Dir, r)
		}
		out = append(out, filepath.Clean(r))
	}
	return out, nil
}

// Roots are the mount roots of a run of the config with workspace (its
// absolute path): the config's MountRoots narrowed to the operator's
// (a policy file's allowed_mount_roots) or, when the operator gives none,
// to the config's directory and the workspace. A config never widens
// what the operator allows: without a policy file it mounts from its own
// directory and the workspace only, whatever its allowed_mount_roots say.
// An empty result means nothing may be mounted.
func (c *RLMSandbox) Roots(operator []string, workspace string) ([]string, error) {
	roots, err := c.MountRoots(workspace)
	if err != nil {
		return nil, err
	}
	if len(operator) == 0 {
		operator = c.defaultRoots(workspace)
	}
	return NarrowRoots(operator, roots), nil
}

// defaultRoots are the config's directory, when DirRoot allows it, and
// the workspace, when given.
func (c *RLMSandbox) defaultRoots(workspace string) []string {
	var roots []string
	if _, err := c.DirRoot(); err == nil {
		roots = append(roots, c.Dir)
	}
	if workspace != "" {
		roots = append(roots, workspace)
	}
	return roots
}

// DirRoot is the config's directory as a default mount root, or why it
// is none: a directory others may write to (world-writable or sticky, as
// /tmp: other users' files and sockets sit there), /, or the caller's
// home or a directory above it (its .ssh, .gnupg, tokens and shell
// history). A config anywhere else is in a project directory of its
// own, which it may mount from.
func (c *RLMSandbox) DirRoot() (string, error) {
	d := filepath.Clean(c.Dir)
	if !filepath.IsAbs(d) {
		return "", fmt.Errorf("the config's directory %q is not absolute", c.Dir)
	}
	if d == "/" {
		return "", fmt.Errorf("the config's directory is /")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		if real, err := filepath.EvalSymlinks(home); err == nil {
			home = real
		}
		if within(filepath.Clean(home), d) {
			return "", fmt.Errorf("the config's directory %s is the home directory %s or lies above it", d, home)
		}
	}
	fi, err := os.Stat(d)
	if err != nil {
		return "", fmt.Errorf("the config's directory: %w", err)
	}
	if m := fi.Mode(); m&0o002 != 0 || m&os.ModeSticky != 0 {
		return "", fmt.Errorf("the config's directory %s is world-writable or sticky (mode %v): other users' files lie there", d, m)
	}
	return d, nil
}

// Env is the request environment rlm_code's docker runtime passes
// (_get_safe_env): PYTHONPATH empty, PYTHONUNBUFFERED=1, HOME and TMPDIR
// /tmp, and each env_allowlist key's host value (lookup) with CR and LF
// removed.
func (c *RLMSandbox) Env(lookup func(string) (string, bool)) map[string]string {
	env := map[string]string{"PYTHONPATH": "", "PYTHONUNBUFFERED": "1", "HOME": "/tmp", "TMPDIR": "/tmp"}
	for _, k := range c.EnvAllowlist {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if v, ok := lookup(k); ok {
			env[k] = strings.NewReplacer("\n", "", "\r", "").Replace(v)
		}
	}
	return env
}

// DockerArgv is the docker command line rlm_code's DockerSandboxRuntime
// builds (reference §3.2), in its order: workdir's volume, env sorted by
// key, --network none unless enabled (then --network bridge: Docker's
// default, which slopbox's is not), --memory, --cpus, the extra args, the
// image and the command. It is run through slopbox's one docker parser, so
// extra_args meet the same policy as any command line.
func (c *RLMSandbox) DockerArgv(workdir string, env map[string]string, command []string) ([]string, error) {
	argv := []string{"run", "--rm", "--workdir", "/workspace", "--volume", workdir + ":/workspace:rw"}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		argv = append(argv, "--env", k+"="+env[k])
	}
	if c.Docker.NetworkEnabled {
		argv = append(argv, "--network", "bridge")
	} else {
		argv = append(argv, "--network", "none")
	}
	mem := 512 // int(cfg or 512): a configured 0 is 512
	if c.Docker.MemoryLimitMB != nil && *c.Docker.MemoryLimitMB != 0 {
		mem = *c.Docker.MemoryLimitMB
	}
	if mem > 0 {
		argv = append(argv, "--memory", strconv.Itoa(mem)+"m")
	}
	cpus := 1.0
	if c.Docker.CPUs != nil {
		cpus = *c.Docker.CPUs
	}
	if cpus > 0 {
		argv = append(argv, "--cpus", pythonFloat(cpus))
	}
	// rlm_code refuses --network=host; slopbox checks the parsed command
	// line instead (env run: what --network became, in every spelling,
	// and that extra_args leave the image and the command in place).
	for _, a := range c.Docker.ExtraArgs {
		argv = append(argv, strings.TrimSpace(a))
	}
	return append(append(argv, c.Docker.Image), command...), nil
}

// pythonFloat prints f as Python's str(float) does for ordinary values
// (1.0, 0.5, 2.0).
func pythonFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}
