//go:build tools

// Package runtimetools pins the OCI runtime-spec's conformance suite,
// opencontainers/runtime-tools, whose validation binaries and runtimetest
// TestRuntimeTools (test/integration) builds from this module and runs
// against slopbox-runc, runc and crun. It is a module of its own so its
// old dependencies stay out of slopbox's.
package runtimetools

import (
	_ "github.com/opencontainers/runtime-tools/cmd/runtimetest"
	_ "github.com/opencontainers/runtime-tools/validation/util"
)
