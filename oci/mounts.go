package oci

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Mount errors, wrapped with context; check them with errors.Is.
var (
	// ErrMountInWorkdir: a bind mount target lies strictly inside the workdir.
	ErrMountInWorkdir = errdefs.ErrInvalidArgument.WithMessage("mount target is inside the workdir")
	// ErrMountNotAllowed: a bind source lies outside every allowed root.
	ErrMountNotAllowed = errdefs.ErrInvalidArgument.WithMessage("mount source is outside the allowed mount roots")
	// ErrBadMount: a mount is malformed (empty or relative paths, "/" as
	// target, a static save_path escaping /static, ...).
	ErrBadMount = errdefs.ErrInvalidArgument.WithMessage("invalid mount")
)

// DefaultWorkdir is where the workspace is mounted when MountPlan.Workdir is
// empty.
const DefaultWorkdir = "/workspace"

// StaticDir is the container directory static assets are published under.
const StaticDir = "/static"

// BindSource is a requested bind mount: a host Source (absolute, or relative
// to the workspace) at a container Target.
type BindSource struct {
	Source   string
	Target   string
	ReadOnly bool
}

// MountPlan describes every bind mount of a sandbox. See Resolve.
type MountPlan struct {
	// Workspace is the host workspace directory (absolute). Relative
	// sources resolve against it.
	Workspace string
	// Workdir is the container path of the workspace (default /workspace).
	Workdir string
	// MountWorkspace mounts Workspace read-write at Workdir.
	MountWorkspace bool
	// Extra are the spec's extra_mounts (lower precedence than Spawn).
	Extra []BindSource
	// Spawn are spawn-time mounts.
	Spawn []BindSource
	// Static are static assets; Target is the save_path, and each one is
	// mounted read-only at /static/<save_path> whatever ReadOnly says.
	Static []BindSource
	// AnyTarget lifts the workdir rule for a sandbox whose workspace is
	// not mounted and that names no workdir (docker's -v knows no such
	// rule; SlopCodeBench's extra_mounts do).
	AnyTarget bool
	// AllowedRoots, when non-empty, restricts every bind source (the
	// workspace included) to these absolute host directories.
	AllowedRoots []string
	// EvalSource, when set, maps each absolute source to its real path
	// before the allowed-roots check (pass filepath.EvalSymlinks so a
	// symlink inside a root cannot point outside it). Its result is also
	// the mount source. Nil leaves sources as given (no I/O).
	EvalSource func(string) (string, error)
	// EvalBeneath, when set, maps each relative source to its real path,
	// resolved strictly beneath the workspace: it must refuse a symlink
	// or ".." that leads out (a sandbox can plant symlinks in its
	// workspace for the next run that mounts them). Nil joins the paths
	// lexically (no I/O); a relative source whose ".." climbs out of the
	// workspace is refused either way.
	EvalBeneath func(root, rel string) (string, error)
}

type planned struct {
	source, target string
	readOnly       bool
	// rel is the source relative to the workspace, when it was given so.
	rel string
}

// Resolve returns the final bind mounts.
//
// Precedence, lowest first: the workspace (rw at Workdir, when
// MountWorkspace) < Extra < Spawn < Static (ro at /static/<save_path>). A
// later mount replaces an earlier one at the same cleaned container path.
// Relative host paths resolve against Workspace. Targets must be absolute
// and not "/"; a target strictly inside Workdir is rejected (path
// components are compared: /workspace2 is not inside /workspace). Sources
// must be absolute after resolution and, when AllowedRoots is non-empty,
// inside one of them.
//
// The result is sorted by container path depth, parents first (ties by
// path), each a "bind" mount with options rbind, ro|rw, nosuid, nodev.
func (p MountPlan) Resolve() ([]specs.Mount, error) {
	r, err := p.resolver()
	if err != nil {
		return nil, err
	}
	if p.MountWorkspace {
		if r.workspace == "" {
			return nil, fmt.Errorf("%w: the workspace is mounted but no workspace directory is set", ErrBadMount)
		}
		r.put(planned{source: r.workspace, target: r.workdir})
	}
	if err := r.addBinds(); err != nil {
		return nil, err
	}
	out := make([]specs.Mount, 0, len(r.order))
	for _, t := range r.order {
		m, err := r.mount(t)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortStableFunc(out, func(a, b specs.Mount) int {
		if da, db := depth(a.Destination), depth(b.Destination); da != db {
			return da - db
		}
		return strings.Compare(a.Destination, b.Destination)
	})
	return out, nil
}

// resolver is one Resolve under way: the plan's checked and cleaned
// workdir, workspace and allowed roots, and the mounts planned so far by
// target.
type resolver struct {
	p                  MountPlan
	workdir, workspace string
	roots              []string
	// byTarget keeps insertion order of first appearance (order); later
	// entries overwrite the value in place.
	order    []string
	byTarget map[string]planned
}

// resolver checks the plan's workdir, workspace and allowed roots (each
// must be absolute, the workdir not /) and returns them cleaned in a
// resolver with no mount planned yet.
func (p MountPlan) resolver() (*resolver, error) {
	workdir := p.Workdir
	if workdir == "" {
		workdir = DefaultWorkdir
	}
	if !path.IsAbs(workdir) {
		return nil, fmt.Errorf("%w: workdir %q must be an absolute container path", ErrBadMount, p.Workdir)
	}
	workdir = path.Clean(workdir)
	if workdir == "/" {
		return nil, fmt.Errorf("%w: workdir must not be /", ErrBadMount)
	}

	workspace := ""
	if p.Workspace != "" {
		if !filepath.IsAbs(p.Workspace) {
			return nil, fmt.Errorf("%w: workspace %q must be an absolute host path", ErrBadMount, p.Workspace)
		}
		workspace = filepath.Clean(p.Workspace)
	}

	roots := make([]string, 0, len(p.AllowedRoots))
	for _, r := range p.AllowedRoots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("%w: allowed mount root %q must be an absolute host path", ErrBadMount, r)
		}
		roots = append(roots, filepath.Clean(r))
	}
	return &resolver{p: p, workdir: workdir, workspace: workspace, roots: roots, byTarget: map[string]planned{}}, nil
}

// put plans m, replacing the mount planned at its target, if any, in
// that one's place.
func (r *resolver) put(m planned) {
	if _, ok := r.byTarget[m.target]; !ok {
		r.order = append(r.order, m.target)
	}
	r.byTarget[m.target] = m
}

// addBinds plans the Extra, then Spawn, then Static mounts, checking
// each one's target (Static's is a path in StaticDir).
func (r *resolver) addBinds() error {
	for _, group := range []struct {
		kind string
		list []BindSource
	}{{"extra", r.p.Extra}, {"spawn", r.p.Spawn}} {
		for _, b := range group.list {
			if b.Target == "" {
				return fmt.Errorf("%w: %s mount %q has an empty target", ErrBadMount, group.kind, b.Source)
			}
			if !path.IsAbs(b.Target) {
				return fmt.Errorf("%w: %s mount %q -> %q: the target must be an absolute container path", ErrBadMount, group.kind, b.Source, b.Target)
			}
			if err := r.add(group.kind, b, path.Clean(b.Target), b.ReadOnly); err != nil {
				return err
			}
		}
	}
	for _, b := range r.p.Static {
		target := path.Join(StaticDir, b.Target)
		if !within(target, StaticDir) || target == StaticDir {
			return fmt.Errorf("%w: static asset %q: save_path %q must name a path inside %s", ErrBadMount, b.Source, b.Target, StaticDir)
		}
		if err := r.add("static asset", b, target, true); err != nil {
			return err
		}
	}
	return nil
}

// add plans bind b at target (cleaned and absolute): its source made
// absolute against the workspace, the target neither / nor (without
// AnyTarget) strictly inside the workdir.
func (r *resolver) add(kind string, b BindSource, target string, readOnly bool) error {
	src, rel, err := resolveSource(b.Source, r.workspace)
	if err != nil {
		return fmt.Errorf("%s mount %q -> %q: %w", kind, b.Source, b.Target, err)
	}
	if target == "/" {
		return fmt.Errorf("%w: %s mount %q -> %q: the target must not be /", ErrBadMount, kind, b.Source, b.Target)
	}
	if !r.p.AnyTarget && within(target, r.workdir) && target != r.workdir {
		return fmt.Errorf("%w: %s mount %q -> %q: %q is inside the workdir %q; mount it elsewhere or put the files in the workspace",
			ErrMountInWorkdir, kind, b.Source, b.Target, target, r.workdir)
	}
	r.put(planned{source: src, target: target, readOnly: readOnly, rel: rel})
	return nil
}

// mount is the bind mount planned at target t: its source evaluated
// (EvalBeneath for one given relative to the workspace, else EvalSource)
// and checked against the allowed roots.
func (r *resolver) mount(t string) (specs.Mount, error) {
	m := r.byTarget[t]
	src := m.source
	eval := r.p.EvalSource
	if m.rel != "" && r.p.EvalBeneath != nil {
		eval = func(string) (string, error) { return r.p.EvalBeneath(r.workspace, m.rel) }
	}
	if eval != nil {
		resolved, err := eval(src)
		if err != nil {
			return specs.Mount{}, fmt.Errorf("%w: mount %q -> %q: %w", ErrBadMount, src, t, err)
		}
		if !filepath.IsAbs(resolved) {
			return specs.Mount{}, fmt.Errorf("%w: mount %q -> %q: source resolved to relative path %q", ErrBadMount, src, t, resolved)
		}
		src = filepath.Clean(resolved)
	}
	if !WithinAny(src, r.roots) {
		return specs.Mount{}, fmt.Errorf("%w: %q (mounted at %q) is not inside any of: %s",
			ErrMountNotAllowed, src, t, strings.Join(r.roots, ", "))
	}
	mode := "rw"
	if m.readOnly {
		mode = "ro"
	}
	return specs.Mount{
		Destination: t,
		Type:        "bind",
		Source:      src,
		Options:     []string{"rbind", mode, "nosuid", "nodev"},
	}, nil
}

// resolveSource makes a host source absolute: relative sources resolve
// against workspace (already cleaned, may be empty) and are also returned
// cleaned as rel. One whose ".." leads out of the workspace is refused.
func resolveSource(src, workspace string) (abs, rel string, err error) {
	if src == "" {
		return "", "", fmt.Errorf("%w: empty source", ErrBadMount)
	}
	if filepath.IsAbs(src) {
		return filepath.Clean(src), "", nil
	}
	if workspace == "" {
		return "", "", fmt.Errorf("%w: relative source %q needs a workspace to resolve against", ErrBadMount, src)
	}
	rel = filepath.Clean(src)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", "", fmt.Errorf("%w: relative source %q leads out of the workspace; name a path inside it, or an absolute path", ErrBadMount, src)
	}
	return filepath.Join(workspace, rel), rel, nil
}

// WithinAny reports whether the clean absolute path p is one of roots or
// lies beneath one, comparing whole path components; any p is, when there
// are no roots (no restriction).
func WithinAny(p string, roots []string) bool {
	return len(roots) == 0 || slices.ContainsFunc(roots, func(r string) bool { return within(p, filepath.Clean(r)) })
}

// within reports whether p equals dir or lies below it, comparing whole path
// components. Both must be clean and absolute.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// depth is the number of components of a clean absolute path ("/" is 0).
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
