package dockercompat

import (
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// Policy is an operator's sandbox policy file (slopbox --policy FILE,
// $SLOPBOX_POLICY, or /etc/slopbox/policy.yaml):
//
//	allowed_mount_roots: [/srv/work, /tmp]   # bind sources must lie inside
//	allow_unsafe: [cap-add=NET_ADMIN]        # as --allow-unsafe, for every run
//
// An rlm_code config is a policy file too: its sandbox.allowed_mount_roots
// (rlm_code's defaults when empty) apply.
type Policy struct {
	AllowedMountRoots []string `yaml:"allowed_mount_roots"`
	AllowUnsafe       []string `yaml:"allow_unsafe"`
}

var policyKeys = []string{"allowed_mount_roots", "allow_unsafe"}

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
		roots, err := c.MountRoots()
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", file, err)
		}
		return &Policy{AllowedMountRoots: roots}, nil
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("policy %s: %w: %v", file, ErrBadSpec, err)
	}
	p := &Policy{}
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
