package backend

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// HandOverWorkdir treats the docker idiom of a workspace, `-w D -v SRC:D`
// (rlm_code's `--workdir /workspace --volume DIR:/workspace:rw`, and
// SlopCodeBench's docker-py working_dir plus volumes) with SRC a temporary
// directory, as slopbox treats Workspace: as root, SRC's root-owned entries
// are handed to the sandbox's user (Mount.HandOver), so a harness's
// root-owned temporary workspace is writable by container root (SPEC
// "Security decisions"). Nothing outside the temporary directories changes
// owner unasked: for any other read-write bind of a directory owned by host
// root, the returned notes say why the sandbox cannot write it and how to
// hand it over (:U). The CLI and the Engine API both apply it.
func (s *SpawnSpec) HandOverWorkdir(workdir string) (notes []string) {
	if os.Geteuid() != 0 {
		return nil // rootless: the caller's own files map to container root
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.ReadOnly {
			continue
		}
		if s.Workspace == "" && workdir != "" && path.Clean(m.Target) == path.Clean(workdir) && inTempDir(m.Source) {
			m.HandOver = true
		}
		if m.HandOver {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(m.Source, &st) == nil && st.Uid == 0 && st.Mode&0o002 == 0 {
			notes = append(notes, fmt.Sprintf("%s is owned by host root, which no sandbox id maps to (container root is not host root), so the sandbox cannot write there; add :U (-v %s:%s:U) to give its root-owned files to the sandbox's user, or chown it to an unprivileged id", m.Source, m.Source, m.Target))
		}
	}
	return notes
}

// inTempDir reports whether src (symlinks resolved) lies below the
// temporary directory ($TMPDIR, /tmp) or /var/tmp.
func inTempDir(src string) bool {
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return false
	}
	for _, dir := range []string{os.TempDir(), "/tmp", "/var/tmp"} {
		if d, err := filepath.EvalSymlinks(dir); err == nil && d != "/" && strings.HasPrefix(real, d+"/") {
			return true
		}
	}
	return false
}
