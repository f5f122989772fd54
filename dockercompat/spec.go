package dockercompat

import (
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"go.yaml.in/yaml/v3"

	"github.com/slopbox/slopbox/backend"
)

// ErrBadSpec is wrapped by every environment-spec validation error.
var ErrBadSpec = errdefs.ErrInvalidArgument.WithMessage("invalid environment spec")

// Spec is a SlopCodeBench environment spec (EnvironmentSpec, with its
// DockerEnvironmentSpec and LocalEnvironmentSpec variants).
type Spec struct {
	Type        string      `yaml:"type"` // docker or local
	Name        string      `yaml:"name"`
	Docker      *Docker     `yaml:"docker"`
	Local       Local       `yaml:"local"`
	Environment Environment `yaml:"environment"`
	Setup       Setup       `yaml:"setup"`
	Commands    Commands    `yaml:"commands"`
	Snapshot    Snapshot    `yaml:"snapshot"`
}

// Docker is SlopCodeBench's DockerConfig.
type Docker struct {
	Image          string  `yaml:"image"`
	Binary         string  `yaml:"binary"`
	Workdir        string  `yaml:"workdir"`
	MountWorkspace *bool   `yaml:"mount_workspace"`
	ExtraMounts    []Mount `yaml:"-"` // from extra_mounts, in file order
	Network        string  `yaml:"network"`
	User           string  `yaml:"user"`
	// KeepContainerAfterClean is documented upstream but was never a
	// field there (a spec setting it failed validation); slopbox honours
	// it: the sandbox survives cleanup for inspection.
	KeepContainerAfterClean bool `yaml:"keep_container_after_clean"`
}

// Mount is one extra_mounts entry: the string form ("src: /dst") is
// read-only, the dict form ({bind, mode}) sets the mode.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Local is LocalConfig (neither field is used by any runtime upstream).
type Local struct {
	RequiresTTY bool   `yaml:"requires_tty"`
	Shell       string `yaml:"shell"`
}

// Environment is EnvironmentConfig.
type Environment struct {
	Env          map[string]string `yaml:"env"`
	IncludeOSEnv bool              `yaml:"include_os_env"`
}

// Setup is SetupConfig.
type Setup struct {
	Commands       []string `yaml:"commands"`
	EvalCommands   []string `yaml:"eval_commands"`
	ResumeCommands []string `yaml:"resume_commands"`
}

// Commands is CommandConfig.
type Commands struct {
	EntryFile    string  `yaml:"entry_file"`
	Command      string  `yaml:"command"`
	AgentCommand *string `yaml:"agent_command"`
}

// Snapshot is SnapshotConfig.
type Snapshot struct {
	KeepGlobs      []string `yaml:"keep_globs"` // nil: keep everything not ignored
	IgnoreGlobs    []string `yaml:"ignore_globs"`
	Compression    string   `yaml:"compression"`
	ArchiveSaveDir string   `yaml:"archive_save_dir"`
}

// The keys each section accepts (SlopCodeBench's models forbid extras).
var validKeys = map[string][]string{
	"":            {"type", "name", "docker", "local", "environment", "setup", "commands", "snapshot"},
	"docker":      {"image", "binary", "workdir", "mount_workspace", "extra_mounts", "network", "user", "keep_container_after_clean"},
	"local":       {"requires_tty", "shell"},
	"environment": {"env", "include_os_env"},
	"setup":       {"commands", "eval_commands", "resume_commands"},
	"commands":    {"entry_file", "command", "agent_command"},
	"snapshot":    {"keep_globs", "ignore_globs", "compression", "archive_save_dir"},
	"mount":       {"bind", "mode"},
}

// LoadSpec reads and validates the spec in file.
func LoadSpec(file string) (*Spec, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s, err := ParseSpec(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// ParseSpec validates and decodes a spec, filling in SlopCodeBench's
// defaults.
func ParseSpec(data []byte) (*Spec, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrBadSpec)
	}
	doc := root.Content[0]
	if err := checkKeys(doc, "", ""); err != nil {
		return nil, err
	}
	for _, sec := range []string{"docker", "local", "environment", "setup", "commands", "snapshot"} {
		if n := field(doc, sec); n != nil && n.Kind != yaml.ScalarNode {
			if err := checkKeys(n, sec, sec+"."); err != nil {
				return nil, err
			}
		}
	}
	var s Spec
	if err := doc.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if s.Docker != nil {
		mounts, err := extraMounts(field(field(doc, "docker"), "extra_mounts"))
		if err != nil {
			return nil, err
		}
		s.Docker.ExtraMounts = mounts
	}
	if err := s.defaults(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Spec) defaults() error {
	switch s.Type {
	case "docker":
		if s.Docker == nil || s.Docker.Image == "" {
			return fmt.Errorf("%w: a docker spec needs docker.image", ErrBadSpec)
		}
		if s.Docker.Binary == "" {
			s.Docker.Binary = "docker"
		}
		if s.Docker.Workdir == "" {
			s.Docker.Workdir = "/workspace"
		}
		if s.Docker.MountWorkspace == nil {
			t := true
			s.Docker.MountWorkspace = &t
		}
	case "local":
		if s.Docker != nil {
			return fmt.Errorf("%w: a local spec has no docker section", ErrBadSpec)
		}
	case "":
		return fmt.Errorf("%w: type is required (docker or local)", ErrBadSpec)
	default:
		return fmt.Errorf("%w: unknown type %q (docker or local)", ErrBadSpec, s.Type)
	}
	if s.Name == "" {
		return fmt.Errorf("%w: name is required", ErrBadSpec)
	}
	if s.Commands.EntryFile == "" {
		s.Commands.EntryFile = "{entry_file}"
	}
	if s.Commands.Command == "" {
		s.Commands.Command = "python"
	}
	if s.Snapshot.IgnoreGlobs == nil {
		s.Snapshot.IgnoreGlobs = slices.Clone(DefaultIgnoreGlobs)
	}
	switch s.Snapshot.Compression {
	case "":
		s.Snapshot.Compression = "gz"
	case "gz", "bz2", "xz", "none":
	default:
		return fmt.Errorf("%w: snapshot.compression %q: use gz, bz2, xz or none", ErrBadSpec, s.Snapshot.Compression)
	}
	return nil
}

// checkKeys refuses a key of mapping n that section does not accept.
func checkKeys(n *yaml.Node, section, prefix string) error {
	if n.Kind != yaml.MappingNode {
		where := strings.TrimSuffix(prefix, ".")
		if where == "" {
			where = "the spec"
		}
		return fmt.Errorf("%w: %s must be a mapping (line %d)", ErrBadSpec, where, n.Line)
	}
	valid := validKeys[section]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !slices.Contains(valid, k) {
			return fmt.Errorf("%w: unknown key %q (line %d); valid keys%s are: %s", ErrBadSpec, prefix+k, n.Content[i].Line,
				map[bool]string{true: "", false: " in " + strings.TrimSuffix(prefix, ".")}[prefix == ""], strings.Join(valid, ", "))
		}
	}
	return nil
}

// field returns the value node of key in mapping n, or nil.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// extraMounts reads docker.extra_mounts: {source: target} (read-only) or
// {source: {bind: target, mode: ro|rw}}.
func extraMounts(n *yaml.Node) ([]Mount, error) {
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: docker.extra_mounts must be a mapping of host path to container path (line %d)", ErrBadSpec, n.Line)
	}
	var out []Mount
	for i := 0; i+1 < len(n.Content); i += 2 {
		src, v := n.Content[i].Value, n.Content[i+1]
		m := Mount{Source: src, ReadOnly: true}
		switch v.Kind {
		case yaml.ScalarNode:
			m.Target = v.Value
		case yaml.MappingNode:
			if err := checkKeys(v, "mount", "docker.extra_mounts."+src+"."); err != nil {
				return nil, err
			}
			var d struct{ Bind, Mode string }
			if err := v.Decode(&d); err != nil {
				return nil, fmt.Errorf("%w: docker.extra_mounts.%s: %v", ErrBadSpec, src, err)
			}
			m.Target = d.Bind
			switch d.Mode {
			case "", "ro":
			case "rw":
				m.ReadOnly = false
			default:
				return nil, fmt.Errorf("%w: docker.extra_mounts.%s.mode %q: use ro or rw", ErrBadSpec, src, d.Mode)
			}
		default:
			return nil, fmt.Errorf("%w: docker.extra_mounts.%s: want a container path or {bind, mode} (line %d)", ErrBadSpec, src, v.Line)
		}
		if m.Source == "" || !path.IsAbs(m.Target) {
			return nil, fmt.Errorf("%w: docker.extra_mounts.%s: the target %q must be an absolute container path", ErrBadSpec, src, m.Target)
		}
		out = append(out, m)
	}
	return out, nil
}

// SetupCommands are setup.commands, then setup.eval_commands when
// evaluating (get_setup_commands).
func (s *Spec) SetupCommands(evaluation bool) []string {
	out := slices.Clone(s.Setup.Commands)
	if evaluation {
		out = append(out, s.Setup.EvalCommands...)
	}
	return out
}

// FormatEntryFile fills commands.entry_file's {entry_file} placeholder;
// any other placeholder, or an empty result, is an error.
func (s *Spec) FormatEntryFile(entryFile string) (string, error) {
	t := s.Commands.EntryFile
	var b strings.Builder
	for len(t) > 0 {
		i := strings.IndexAny(t, "{}")
		if i < 0 {
			b.WriteString(t)
			break
		}
		b.WriteString(t[:i])
		t = t[i:]
		switch {
		case strings.HasPrefix(t, "{{"), strings.HasPrefix(t, "}}"):
			b.WriteByte(t[0])
			t = t[2:]
		case strings.HasPrefix(t, "{entry_file}"):
			b.WriteString(entryFile)
			t = t[len("{entry_file}"):]
		default:
			return "", fmt.Errorf("%w: commands.entry_file %q: only {entry_file} may be used", ErrBadSpec, s.Commands.EntryFile)
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("%w: commands.entry_file %q gives an empty file name", ErrBadSpec, s.Commands.EntryFile)
	}
	return b.String(), nil
}

// Command is the command that runs entryFile: commands.agent_command for
// an agent run when set, else commands.command, then the formatted entry
// file (get_command).
func (s *Spec) Command(entryFile string, agentRun bool) (string, error) {
	f, err := s.FormatEntryFile(entryFile)
	if err != nil {
		return "", err
	}
	cmd := s.Commands.Command
	if agentRun && s.Commands.AgentCommand != nil {
		cmd = *s.Commands.AgentCommand
	}
	return strings.TrimSpace(strings.TrimSpace(cmd) + " " + f), nil
}

// StaticAsset is a static asset of a task: mounted read-only at
// /static/<SavePath>; IsDir for a directory source.
type StaticAsset struct {
	Name, Source, SavePath string
	IsDir                  bool
}

// IgnoreGlobs are snapshot.ignore_globs, plus tests/assets and every
// static asset's save path (get_ignore_globs).
func (s *Spec) IgnoreGlobs(assets []StaticAsset) []string {
	set := map[string]bool{"tests/assets": true, "tests/assets/*": true}
	for _, g := range s.Snapshot.IgnoreGlobs {
		set[g] = true
	}
	for _, a := range assets {
		set[a.SavePath] = true
		if a.IsDir {
			set[a.SavePath+"/*"] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// SpawnOptions are what a run adds to a spec.
type SpawnOptions struct {
	Workspace  string
	Evaluation bool
	Image      string // overrides docker.image
	Assets     []StaticAsset
	Env        map[string]string
	// AgentUser is the agent context's default user (SlopCodeBench:
	// backend.AgentUserFromEnv()).
	AgentUser string
}

// SpawnSpec turns a docker spec and a run's options into a SpawnSpec
// (user and setup by context, mounts by precedence). The runtime image is
// docker.image, or opts.Image.
func (s *Spec) SpawnSpec(opts SpawnOptions) (backend.SpawnSpec, error) {
	sp := backend.SpawnSpec{
		Workspace:    opts.Workspace,
		SpecEnv:      s.Environment.Env,
		Env:          opts.Env,
		IncludeOSEnv: s.Environment.IncludeOSEnv,
		Setup:        backend.Setup{Commands: s.Setup.Commands, EvalCommands: s.Setup.EvalCommands},
		Context:      backend.ContextAgent,
		AgentUser:    opts.AgentUser,
	}
	if opts.Evaluation {
		sp.Context = backend.ContextEvaluation
	}
	for _, a := range opts.Assets {
		sp.StaticAssets = append(sp.StaticAssets, backend.StaticAsset{Source: a.Source, SavePath: a.SavePath})
	}
	if s.Type != "docker" {
		return sp, nil
	}
	d := s.Docker
	sp.Image = d.Image
	if opts.Image != "" {
		sp.Image = opts.Image
	}
	sp.Workdir, sp.NoWorkspaceMount = d.Workdir, !*d.MountWorkspace
	sp.User, sp.Keep = d.User, d.KeepContainerAfterClean
	sp.Network = d.Network
	if sp.Network == "" {
		// SlopCodeBench's effective_network_mode: bridge when unset.
		sp.Network = backend.NetworkBridge
	}
	for _, m := range d.ExtraMounts {
		sp.Mounts = append(sp.Mounts, backend.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return sp, nil
}

// ResolvePlaceholders replaces each {{static:NAME}} in s with where asset
// NAME is seen: /static/<save_path> in a sandbox, its absolute host path
// for a local run (resolve_static_placeholders). An unknown name is an
// error.
func ResolvePlaceholders(s string, assets []StaticAsset, sandboxed bool) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "{{static:")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		j := strings.Index(s[i:], "}}")
		if j < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		name := s[i+len("{{static:") : i+j]
		k := slices.IndexFunc(assets, func(a StaticAsset) bool { return a.Name == name })
		if k < 0 {
			return "", fmt.Errorf("%w: unknown static asset placeholder: %s", ErrBadSpec, name)
		}
		b.WriteString(s[:i])
		if sandboxed {
			b.WriteString(path.Join("/static", assets[k].SavePath))
		} else {
			b.WriteString(assets[k].Source)
		}
		s = s[i+j+2:]
	}
}
