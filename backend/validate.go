package backend

import (
	"fmt"
	"math"
	"runtime"

	"github.com/containerd/errdefs"
)

// Sentinel errors for values a backend refuses before it creates anything,
// checked with errors.Is.
var (
	// ErrInvalidLimit is wrapped when a Limits value cannot be applied.
	ErrInvalidLimit = errdefs.ErrInvalidArgument.WithMessage("invalid resource limit")
	// ErrInvalidTimeout is wrapped when ExecRequest.Timeout is negative.
	ErrInvalidTimeout = errdefs.ErrInvalidArgument.WithMessage("invalid timeout")
	// ErrUnmappedUser is wrapped when a user's uid, gid or a supplementary
	// group lies outside the ids the sandbox's user namespace maps.
	ErrUnmappedUser = errdefs.ErrInvalidArgument.WithMessage("user outside the sandbox's id range")
	// ErrInvalidValue is wrapped when a name, flag or option given is not
	// one slopbox takes (see InvalidValue).
	ErrInvalidValue = errdefs.ErrInvalidArgument.WithMessage("invalid value")
)

// InvalidValue is an error with the message given that matches
// ErrInvalidValue.
func InvalidValue(format string, a ...any) error {
	return &valueError{fmt.Sprintf(format, a...), ErrInvalidValue}
}

// Validate is what every backend checks of a spec, once, first thing in
// its Spawn (before it creates anything): that its limits can be applied
// as they say (Limits.Validate) and that the sandbox policy allows what
// it weakens (CheckPolicy). The surfaces (the CLI's flags, the Engine
// API, rlm_code configs) only parse into a spec: what it may be is said
// here (test/fences' TestValidateOnce keeps it so).
func (s SpawnSpec) Validate() error {
	if err := s.Limits.Validate(); err != nil {
		return err
	}
	return s.CheckPolicy()
}

// MinMemoryBytes is the smallest memory limit accepted (Docker's: 6 MiB).
const MinMemoryBytes = 6 << 20

// MinCPUs is the smallest CPU limit accepted (Docker's): 1 ms of CPU time
// per 100 ms period, the kernel's smallest CFS quota.
const MinCPUs = 0.01

// valueError keeps a message as it is (Docker's wording where Docker has
// one) and matches its sentinel.
type valueError struct {
	msg      string
	sentinel error
}

func (e *valueError) Error() string { return e.msg }
func (e *valueError) Unwrap() error { return e.sentinel }

// Validate reports the first value of l that cannot be applied as it
// says, wrapping ErrInvalidLimit: a negative memory limit, one below
// MinMemoryBytes, or a CPU count that is not a number or lies outside
// MinCPUs..runtime.NumCPU(). Zero means no limit, and a negative Pids
// means no limit too, as in Docker.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0:
		return &valueError{fmt.Sprintf("invalid memory limit %d: it must not be negative (0 means no limit)", l.MemoryBytes), ErrInvalidLimit}
	case l.MemoryBytes > 0 && l.MemoryBytes < MinMemoryBytes:
		return &valueError{"Minimum memory limit allowed is 6MB", ErrInvalidLimit}
	case l.RootfsBytes < 0:
		return &valueError{fmt.Sprintf("invalid root filesystem size %d: it must not be negative (0 means no limit)", l.RootfsBytes), ErrInvalidLimit}
	case l.TmpBytes < 0:
		return &valueError{fmt.Sprintf("invalid /tmp size %d: it must not be negative (0 means no tmpfs)", l.TmpBytes), ErrInvalidLimit}
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		return &valueError{fmt.Sprintf("invalid CPU limit %v: it must be a number of CPUs (0 means no limit)", l.CPUs), ErrInvalidLimit}
	}
	if n := runtime.NumCPU(); l.CPUs != 0 && (l.CPUs < MinCPUs || l.CPUs > float64(n)) {
		return &valueError{fmt.Sprintf("Range of CPUs is from 0.01 to %d.00, as there are only %d CPUs available", n, n), ErrInvalidLimit}
	}
	return nil
}

// Validate reports a request value that cannot be honoured: a negative
// Timeout (zero means none) wraps ErrInvalidTimeout.
func (r ExecRequest) Validate() error {
	if r.Timeout < 0 {
		return &valueError{fmt.Sprintf("invalid timeout %v: it must not be negative (0 means no timeout)", r.Timeout), ErrInvalidTimeout}
	}
	return nil
}
