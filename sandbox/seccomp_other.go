//go:build !seccomp

package sandbox

import specs "github.com/opencontainers/runtime-spec/specs-go"

// Without the seccomp build tag libcontainer has no seccomp support either;
// profiles are left in the spec, where libcontainer refuses them.
type seccompProgram []byte

// builtWithSeccomp: New refuses to work without it (buildcheck.go).
const builtWithSeccomp = false

type seccompCache struct{ dir string }

func (*seccompCache) get(*specs.LinuxSeccomp) (seccompProgram, error) { return nil, nil }
