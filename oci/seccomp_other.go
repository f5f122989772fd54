//go:build !linux

package oci

import (
	"errors"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultSeccomp is only available on Linux.
func DefaultSeccomp(*specs.Spec) (*specs.LinuxSeccomp, error) {
	return nil, errors.New("seccomp profiles are only supported on linux")
}

// WithSetidModes is only available on Linux.
func WithSetidModes() Opt {
	return func(*specs.Spec) error { return errors.New("seccomp profiles are only supported on linux") }
}
