package dockercompat

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/slopbox/slopbox/backend"
)

// Policy is an operator's sandbox policy file (slopbox --policy FILE,
// $SLOPBOX_POLICY, or /etc/slopbox/policy.yaml):
//
//	allowed_mount_roots: [/srv/work, /tmp]   # bind sources must lie inside
//	allow_unsafe: [cap-add=NET_ADMIN]        # as --allow-unsafe, for every run
//	allow_local: true                        # environment specs may be type: local
//	allow_host_network: true                 # ... may use network: host
//	allow_os_env: true                       # ... may set include_os_env; an rlm_code config's env_allowlist may pass host values
//	allow_volumes: true                      # an rlm_code config's extra_args may use named volumes and --volumes-from
//
// An rlm_code config is a policy file too: its sandbox.allowed_mount_roots
// (its own directory when empty) apply.
type Policy struct {
	AllowedMountRoots []string `yaml:"allowed_mount_roots"`
	AllowUnsafe       []string `yaml:"allow_unsafe"`
	// What an environment spec may ask for that turns isolation off
	// (CheckSpec): refused under a policy file unless allowed here.
	AllowLocal       bool `yaml:"allow_local"`
	AllowHostNetwork bool `yaml:"allow_host_network"`
	AllowOSEnv       bool `yaml:"allow_os_env"`
	// AllowVolumes lets an rlm_code config's extra_args name volumes
	// (-v NAME:/x, --mount type=volume,src=NAME) and --volumes-from:
	// another sandbox's data.
	AllowVolumes bool `yaml:"allow_volumes"`

	// KeepOwnersOutside is set for the run of an rlm_code config (never
	// read from a file) to the operator's workspace: the command line is
	// the config's, and every bind source outside the workspace keeps its
	// host owners (CreateOptions.KeepOwnersOutside).
	KeepOwnersOutside string `yaml:"-"`

	// File is the policy file read.
	File string `yaml:"-"`
}

// Apply puts the policy's bounds into a container's create options, as
// every surface does (the CLI, serve, an rlm_code run); a nil policy
// bounds nothing.
func (p *Policy) Apply(o *CreateOptions) {
	if p == nil {
		return
	}
	o.AllowedMountRoots, o.PolicyUnsafe, o.KeepOwnersOutside = p.AllowedMountRoots, p.AllowUnsafe, p.KeepOwnersOutside
}

// ApplySpec puts the policy's bounds into a spawn spec made without
// create options (an environment spec): its allowances before the spec's.
func (p *Policy) ApplySpec(s *backend.SpawnSpec) {
	if p == nil {
		return
	}
	s.AllowedMountRoots, s.Unsafe = p.AllowedMountRoots, append(slices.Clone(p.AllowUnsafe), s.Unsafe...)
}

var policyKeys = []string{"allowed_mount_roots", "allow_unsafe", "allow_local", "allow_host_network", "allow_os_env", "allow_volumes"}

// LoadPolicy reads the policy in file; relative roots resolve against the
// file's directory.
func LoadPolicy(file string) (*Policy, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if IsRLMConfig(b) {
		c, err := LoadRLMConfig(file)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		roots, err := c.MountRoots("")
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", file, err)
		}
		if len(roots) == 0 { // no roots would be no bound
			_, why := c.DirRoot()
			return nil, fmt.Errorf("policy %s: %w: an rlm_code config as the policy needs sandbox.allowed_mount_roots: %v, so its directory is no mount root", file, ErrBadSpec, why)
		}
		return &Policy{AllowedMountRoots: roots, File: file}, nil
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("policy %s: %w: %v", file, ErrBadSpec, err)
	}
	p := &Policy{File: file}
	if len(root.Content) == 0 {
		return p, nil
	}
	if err := checkKeyList(root.Content[0], "", policyKeys); err != nil {
		return nil, fmt.Errorf("policy %s: %w", file, err)
	}
	if err := root.Content[0].Decode(p); err != nil {
		return nil, fmt.Errorf("policy %s: %w: %v", file, ErrBadSpec, err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	for i, r := range p.AllowedMountRoots {
		if !filepath.IsAbs(r) {
			p.AllowedMountRoots[i] = filepath.Join(filepath.Dir(abs), r)
		}
		p.AllowedMountRoots[i] = filepath.Clean(p.AllowedMountRoots[i])
	}
	return p, nil
}

// SpecAllowances are the operator's command-line leave for what an
// environment spec may ask for (env run --allow-local, --allow-host-network,
// --allow-os-env).
type SpecAllowances struct {
	Local, HostNetwork, OSEnv bool
}

// CheckSpec refuses what spec s (made into sp) asks for that turns its
// isolation off, unless the policy p or the operator's allow permits it:
// type: local (its setup and commands run on the host), network: host (the
// host's network, its loopback services included) and include_os_env (the
// host's environment, its secrets included). With no policy file (p nil)
// a spec gets all three, as upstream; with one, none unless allowed. The
// error names the policy key and the flag that would allow it.
func (p *Policy) CheckSpec(s *Spec, sp backend.SpawnSpec, allow SpecAllowances) error {
	if p == nil {
		return nil
	}
	for _, c := range []struct {
		asked, allowed       bool
		what, key, flag, why string
	}{
		{s.Type == "local", p.AllowLocal || allow.Local, "type: local", "allow_local", "--allow-local",
			"runs its setup and commands on this host, outside any sandbox"},
		{s.Type == "docker" && sp.Network == backend.NetworkHost, p.AllowHostNetwork || allow.HostNetwork, "docker.network: host", "allow_host_network", "--allow-host-network",
			"shares the host's network with the sandbox, services bound to the host's 127.0.0.1 included"},
		{s.Environment.IncludeOSEnv, p.AllowOSEnv || allow.OSEnv, "environment.include_os_env: true", "allow_os_env", "--allow-os-env",
			"hands this process's environment (its secrets included) to the spec's commands"},
	} {
		if c.asked && !c.allowed {
			return fmt.Errorf("%w: the spec's %s %s; the policy file %s does not allow it (set %s: true there, or give env run %s)",
				backend.ErrUnsafe, c.what, c.why, p.File, c.key, c.flag)
		}
	}
	return nil
}

// NarrowRoots is the part of the roots a config asks for (an rlm_code
// config's allowed_mount_roots) that lies inside the operator's: a config
// can narrow the operator's roots, never widen them. No operator roots
// means no bound, so the config's own apply. Paths are compared by
// components, cleaned and absolute; an empty result with operator roots
// means nothing may be mounted.
func NarrowRoots(operator, config []string) []string {
	if len(operator) == 0 {
		return config
	}
	var out []string
	add := func(r string) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, c := range config {
		for _, o := range operator {
			switch c, o := filepath.Clean(c), filepath.Clean(o); {
			case within(c, o):
				add(c)
			case within(o, c):
				add(o)
			}
		}
	}
	return out
}

// within reports whether clean absolute path p is root or lies inside it.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}
