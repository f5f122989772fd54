package oci

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// CapabilityName turns a Docker-style name ("sys_admin", "SYS_ADMIN",
// "CAP_SYS_ADMIN") into the kernel's ("CAP_SYS_ADMIN"); "ALL" stays "ALL".
// An unknown name is an error.
func CapabilityName(name string) (string, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if n == "ALL" {
		return n, nil
	}
	n = "CAP_" + strings.TrimPrefix(n, "CAP_")
	for _, c := range capability.ListKnown() {
		if "CAP_"+strings.ToUpper(c.String()) == n {
			return n, nil
		}
	}
	return "", badOption("unknown capability %q", name)
}

// WithCapabilities adds and then drops capabilities (Docker's names; "ALL"
// for every one the kernel knows) in the bounding, effective and permitted
// sets, and re-resolves the seccomp profile against the new bounding set
// as Docker does (a syscall gated on a capability is allowed once that
// capability is granted).
func WithCapabilities(add, drop []string) Opt {
	return func(s *specs.Spec) error {
		if len(add) == 0 && len(drop) == 0 {
			return nil
		}
		ensureProcess(s)
		if s.Process.Capabilities == nil {
			s.Process.Capabilities = &specs.LinuxCapabilities{}
		}
		set := slices.Clone(s.Process.Capabilities.Bounding)
		for _, a := range add {
			n, err := CapabilityName(a)
			if err != nil {
				return err
			}
			if n == "ALL" {
				set = set[:0]
				for _, c := range capability.ListKnown() {
					set = append(set, "CAP_"+strings.ToUpper(c.String()))
				}
				continue
			}
			if !slices.Contains(set, n) {
				set = append(set, n)
			}
		}
		for _, d := range drop {
			n, err := CapabilityName(d)
			if err != nil {
				return err
			}
			set = slices.DeleteFunc(set, func(c string) bool { return n == "ALL" || c == n })
		}
		slices.Sort(set)
		c := s.Process.Capabilities
		c.Bounding, c.Effective, c.Permitted = set, slices.Clone(set), slices.Clone(set)
		if s.Linux != nil && s.Linux.Seccomp != nil {
			sc, err := DefaultSeccomp(s)
			if err != nil {
				return fmt.Errorf("seccomp profile for the capabilities: %w", err)
			}
			s.Linux.Seccomp = sc
		}
		return nil
	}
}
