package sandbox

import (
	"debug/elf"
	"fmt"
	"strings"
	"sync"
)

// buildTags is the go build line a program using this package needs
// (docs/go-api.md).
const buildTags = `CGO_ENABLED=1 go build -tags "seccomp netgo osusergo" -ldflags "-extldflags -static"`

// buildProblem says what the running binary lacks that sandboxes need,
// or "": the seccomp build tag (without it libcontainer cannot load the
// default profile, and every spawn failed with "seccomp not supported"),
// and, unless slopbox's spawn server is embedded (the slopbox_helper
// tag), static linking: the binary itself is the sandboxes' init, run
// inside each one where no host library is. New refuses to open a
// Backend when the binary is wrong, naming the build line.
var buildProblem = sync.OnceValue(func() string {
	var missing []string
	if !builtWithSeccomp {
		missing = append(missing, "the seccomp build tag (libseccomp through cgo: CGO_ENABLED=1, libseccomp-dev)")
	}
	if len(spawnHelper) == 0 && !staticExecutable("/proc/self/exe") {
		missing = append(missing, "static linking (-ldflags \"-extldflags -static\", with the netgo and osusergo tags): without the slopbox_helper tag the program is the sandboxes' init")
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("sandbox: this program was built without %s; build it with\n\t%s\n(docs/go-api.md)", strings.Join(missing, ", nor "), buildTags)
})

// staticExecutable reports whether the ELF file at path has no program
// interpreter (no dynamic loader).
func staticExecutable(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return true // cannot tell: let the spawn say what is wrong
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
