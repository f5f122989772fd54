package imagebuild

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	stdhash "hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/regfile"
	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/internal/tarentry"
)

// copySpec is a COPY or ADD.
type copySpec struct {
	src          string
	sources      []string
	dest         string
	from         string
	chown, chmod string
	add          bool
	contents     []instructions.SourceContent
}

// copy writes a COPY or ADD layer from the context: the sources are read
// through an os.Root of the context (nothing outside it, whatever its
// symlinks say), written as a tar with their destination names, owners
// and modes, and applied over the stage's layers by the store.
func (bl *Builder) copy(ctx context.Context, s *stage, c copySpec, done map[string]*stage) error {
	if len(c.contents) > 0 {
		return errors.New("here-documents in COPY and ADD are not supported by slopbox build")
	}
	uid, gid, err := s.chownIDs(c.chown)
	if err != nil {
		return err
	}
	mode, err := chmodMode(c.chmod)
	if err != nil {
		return err
	}
	dest := c.dest
	if !path.IsAbs(dest) {
		dest = path.Join("/", s.cfg.Config.WorkingDir, dest)
	}
	dirDest := strings.HasSuffix(c.dest, "/") || c.dest == "." || len(c.sources) > 1
	if c.from != "" {
		return bl.copyFrom(ctx, s, c, done, dest, dirDest, uid, gid, mode)
	}
	root, err := os.OpenRoot(bl.o.ContextDir)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer root.Close()
	ig, err := bl.dockerignore(root)
	if err != nil {
		return err
	}
	w := &copyWriter{root: root, uid: uid, gid: gid, mode: mode, ignore: ig, layers: s.layers, written: map[string]bool{}}
	return bl.copyLayer(ctx, s, c.src, w, func() error {
		for _, pat := range c.sources {
			if dirDest, err = w.contextSource(pat, dest, dirDest, c.add); err != nil {
				return err
			}
		}
		return nil
	})
}

// chmodMode is the mode --chmod gives (an octal one, at most 07777), nil
// when it is not given.
func chmodMode(chmod string) (*fs.FileMode, error) {
	if chmod == "" {
		return nil, nil
	}
	m, err := strconv.ParseUint(chmod, 8, 32)
	if err != nil || m > 0o7777 {
		return nil, fmt.Errorf("--chmod=%s: an octal mode is expected", chmod)
	}
	fm := fs.FileMode(m)
	return &fm, nil
}

// copyLayer stages in a temporary file (holes kept) the tar that write
// makes through w (its tar writer, the cache key's sum and the layer's
// size bound set here), and commits it as s's next layer (commitCopy).
func (bl *Builder) copyLayer(ctx context.Context, s *stage, src string, w *copyWriter, write func() error) error {
	tmp, err := os.CreateTemp("", "slopbox-copy-")
	if err != nil {
		return err
	}
	os.Remove(tmp.Name())
	defer tmp.Close()
	// The cache key sums what is copied without modification times, as
	// docker's (TarSum) does: a context sent again is the same.
	h := sha256.New()
	sw := sparse.NewWriter(tmp)
	bw := bufio.NewWriter(sw)
	w.tw, w.sum, w.size = tar.NewWriter(bw), h, bl.layerSize()
	if err := write(); err != nil {
		return err
	}
	if err := w.tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := sw.Close(); err != nil {
		return err
	}
	return bl.commitCopy(ctx, s, src, tmp, h)
}

// contextSource writes context source pat (a path, or a glob of them)
// under dest. A glob matching more than one path makes dest a directory,
// for this source and those after it: it returns whether dest is one.
func (w *copyWriter) contextSource(pat, dest string, dirDest, add bool) (bool, error) {
	if strings.Contains(pat, "://") {
		return dirDest, fmt.Errorf("%s: remote sources are not supported by slopbox build", pat)
	}
	rel := path.Clean("/" + pat)[1:]
	if rel == "" {
		rel = "."
	}
	if cl := path.Clean(pat); cl == ".." || strings.HasPrefix(cl, "../") || strings.HasPrefix(cl, "/..") {
		return dirDest, fmt.Errorf("COPY source %s is outside the build context", pat)
	}
	matches := []string{rel}
	if strings.ContainsAny(rel, "*?[") {
		var err error
		if matches, err = fs.Glob(w.root.FS(), rel); err != nil {
			return dirDest, fmt.Errorf("%s: %w", pat, err)
		}
		matches = w.notIgnored(matches)
		if len(matches) == 0 {
			return dirDest, fmt.Errorf("COPY failed: no source files were specified (%s matches nothing in the build context)", pat)
		}
		if len(matches) > 1 {
			dirDest = true
		}
	}
	for _, m := range matches {
		if err := w.contextMatch(pat, m, dest, dirDest, add); err != nil {
			return dirDest, err
		}
	}
	return dirDest, nil
}

// contextMatch writes context path m, which source pat names, under
// dest: into it when dest is a directory and m is not, unpacked when ADD
// gives a local archive.
func (w *copyWriter) contextMatch(pat, m, dest string, dirDest, add bool) error {
	fi, err := w.root.Stat(m)
	if err != nil {
		return fmt.Errorf("COPY failed: %s: %w", pat, explainOutside(err))
	}
	if w.ignored(m) {
		return fmt.Errorf("COPY failed: %s is excluded by .dockerignore", pat)
	}
	// A FIFO, socket or device named as a source is refused: it
	// has no contents to copy, and reading one would wait on it.
	// One met in a directory is left out (entry), as BuildKit's
	// copier leaves them out.
	if lfi, err := w.root.Lstat(m); err == nil && !lfi.IsDir() && !lfi.Mode().IsRegular() && lfi.Mode()&fs.ModeSymlink == 0 {
		return fmt.Errorf("COPY failed: %s is %s, not a file or directory: refused", m, regfile.Kind(lfi.Mode()))
	}
	if add && fi.Mode().IsRegular() {
		if ok, err := w.addArchive(m, dest); err != nil {
			return err
		} else if ok {
			return nil
		}
	}
	target := dest
	if !fi.IsDir() && (dirDest || w.isDirInImage(dest)) {
		target = path.Join(dest, path.Base(m))
	}
	return w.tree(m, target, fi.IsDir())
}

// commitCopy stores the tar in tmp as s's next layer, or takes the layer
// from the cache: its key is s's chain, the instruction and sum, the sum
// of what is copied.
func (bl *Builder) commitCopy(ctx context.Context, s *stage, src string, tmp *os.File, sum stdhash.Hash) error {
	key := hash(s.chain, src, hex.EncodeToString(sum.Sum(nil)))
	store := bl.b.Store()
	if nl, ok := bl.cached(s, key, src, true); ok {
		fmt.Fprintln(bl.out, " ---> Using cache")
		s.addLayer(nl, store.LayerDir(nl.DiffID), src)
		s.chain = key
		return nil
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	nl, err := store.CommitTar(ctx, s.cfg.RootFS.DiffIDs, tmp, key)
	if err != nil {
		return fmt.Errorf("writing its layer: %w", err)
	}
	s.addLayer(nl, store.LayerDir(nl.DiffID), src)
	s.chain = key
	return nil
}

// copyFrom is COPY --from=STAGE|IMAGE: the sources are read from the
// stage's (or image's) layers by the store (Store.ExportPaths), never
// from the caller's files, and keep their owners (as BuildKit's COPY
// --from does) unless --chown is given, and their modes (setuid bits too)
// unless --chmod is.
func (bl *Builder) copyFrom(ctx context.Context, s *stage, c copySpec, done map[string]*stage, dest string, dirDest bool, uid, gid int, mode *fs.FileMode) error {
	from, err := bl.expand(c.from, s.expandEnv())
	if err != nil {
		return err
	}
	layers, err := bl.source(ctx, from, done)
	if err != nil {
		return fmt.Errorf("COPY --from=%s: %w", from, err)
	}
	for _, pat := range c.sources {
		if strings.Contains(pat, "://") {
			return fmt.Errorf("%s: remote sources are not supported by slopbox build", pat)
		}
	}
	exp, err := os.CreateTemp("", "slopbox-from-")
	if err != nil {
		return err
	}
	os.Remove(exp.Name())
	defer exp.Close()
	store := bl.b.Store()
	matches, err := store.ExportPaths(ctx, layers, c.sources, exp)
	if err != nil {
		return fmt.Errorf("COPY --from=%s failed: %w", from, err)
	}
	perPattern := map[int]int{}
	for _, m := range matches {
		if perPattern[m.Pattern]++; perPattern[m.Pattern] > 1 {
			dirDest = true
		}
	}
	if _, err := exp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	fc := &fromCopy{from: from, dest: dest, base: strings.TrimPrefix(path.Clean(dest), "/"), dirDest: dirDest, matches: matches,
		chown: c.chown != "", uid: uid, gid: gid, mode: mode}
	w := &copyWriter{layers: s.layers, written: map[string]bool{}}
	return bl.copyLayer(ctx, s, c.src, w, func() error {
		return fc.rewrite(w, tar.NewReader(bufio.NewReader(exp)))
	})
}

// fromCopy is a COPY --from's export (Store.ExportPaths) being rewritten
// into its layer: its entries renamed to their destination, their owners
// and modes set as --chown and --chmod say.
type fromCopy struct {
	from, dest string
	base       string // dest, relative to /
	dirDest    bool
	matches    []image.ExportMatch
	chown      bool
	uid, gid   int
	mode       *fs.FileMode
}

// rewrite writes the export's entries that tr reads to w, each once,
// under its destination name.
func (fc *fromCopy) rewrite(w *copyWriter, tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name, err := fc.name(w, hdr.Name)
		if err != nil {
			return err
		}
		if name == "" || name == "." || w.written[name] {
			continue
		}
		w.written[name] = true
		hdr.Name = name
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if fc.chown {
			hdr.Uid, hdr.Gid = fc.uid, fc.gid
		}
		if fc.mode != nil {
			hdr.Mode = int64(*fc.mode)
		}
		if err := w.header(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(io.MultiWriter(w.tw, w.sum), tr); err != nil {
			return err
		}
	}
}

// name is the destination (relative to /) of the export's entry
// exported (the k-th match's "k/PATH"); "" when it is left out (a
// directory match's own entry where the image has dest already).
func (fc *fromCopy) name(w *copyWriter, exported string) (string, error) {
	ks, rel, _ := strings.Cut(strings.TrimSuffix(exported, "/"), "/")
	k, err := strconv.Atoi(ks)
	if err != nil || k < 0 || k >= len(fc.matches) {
		return "", fmt.Errorf("COPY --from=%s: the store exported %q", fc.from, exported)
	}
	m := fc.matches[k]
	if rel == "" {
		rel = "."
	}
	switch {
	case m.Dir && rel == m.Path:
		if w.existsInImage(fc.dest) {
			return "", nil
		}
		return fc.base, nil
	case m.Dir:
		sub := rel
		if m.Path != "." {
			sub = strings.TrimPrefix(rel, m.Path+"/")
		}
		return path.Join(fc.base, sub), nil
	case fc.dirDest || w.isDirInImage(fc.dest):
		return path.Join(fc.base, path.Base(m.Path)), nil
	default:
		return fc.base, nil
	}
}

// source is the layers of COPY --from's source: a stage built before
// (by name or index), else an image (pulled if the store lacks it).
func (bl *Builder) source(ctx context.Context, from string, done map[string]*stage) ([]v1.Hash, error) {
	if st, ok := done[strings.ToLower(from)]; ok {
		return slices.Clone(st.cfg.RootFS.DiffIDs), nil
	}
	store := bl.b.Store()
	img, err := store.Get(from)
	if errors.Is(err, image.ErrNotFound) {
		img, err = store.Pull(ctx, from)
	}
	if err != nil {
		return nil, err
	}
	return slices.Clone(img.Config.RootFS.DiffIDs), nil
}

func explainOutside(err error) error {
	if strings.Contains(err.Error(), "path escapes") {
		return fmt.Errorf("it is (or goes through) a symlink out of the build context: %w", err)
	}
	return err
}

// workdir creates WORKDIR when the image lacks it, as a layer of its own.
func (bl *Builder) workdir(ctx context.Context, s *stage) error {
	dir := s.cfg.Config.WorkingDir
	w := &copyWriter{layers: s.layers}
	if dir == "/" || w.existsInImage(dir) {
		return nil
	}
	return bl.copyTar(ctx, s, "WORKDIR "+dir, func(tw *tar.Writer) error {
		return tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(dir, "/") + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)})
	})
}

// copyTar stores the tar that write makes as a cached layer of s.
func (bl *Builder) copyTar(ctx context.Context, s *stage, src string, write func(*tar.Writer) error) error {
	tmp, err := os.CreateTemp("", "slopbox-copy-")
	if err != nil {
		return err
	}
	os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(tmp, h))
	if err := write(tw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	key := hash(s.chain, src, hex.EncodeToString(h.Sum(nil)))
	store := bl.b.Store()
	nl, ok := store.CachedLayer(key)
	if !ok || bl.o.NoCache {
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if nl, err = store.CommitTar(ctx, s.cfg.RootFS.DiffIDs, tmp, key); err != nil {
			return err
		}
	}
	s.addLayer(nl, store.LayerDir(nl.DiffID), src)
	return nil
}

type copyWriter struct {
	root     *os.Root
	tw       *tar.Writer
	sum      stdhash.Hash // of the entries, without their times
	uid, gid int
	mode     *fs.FileMode
	ignore   *ignoreFile
	layers   []string
	written  map[string]bool
	// size counts the apparent sizes of the files written against the
	// layer's bound (Builder.layerSize); nil: not counted.
	size *sparse.Counter
}

// layerSize bounds the files of a COPY or ADD layer: its tar, staged in
// a temporary file (holes kept) and applied to the store (holes kept),
// holds them in full, as every extraction of the layer elsewhere will.
// A small archive ADD unpacks, or a sparse file in the context or a
// stage, may declare terabytes: the layer is refused once its files add
// up to more than the store's free space, before their contents are
// copied.
func (bl *Builder) layerSize() *sparse.Counter {
	return &sparse.Counter{Bound: sparse.FreeSpace(bl.b.Store().Root())}
}

// tree writes context path rel (a file, or a directory's contents) as
// target.
func (w *copyWriter) tree(rel, target string, isDir bool) error {
	name := strings.TrimPrefix(path.Clean(target), "/")
	if !isDir {
		return w.entry(rel, name)
	}
	if name != "" && !w.existsInImage(target) {
		if err := w.entry(rel, name); err != nil {
			return err
		}
	}
	return fs.WalkDir(w.root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return explainOutside(err)
		}
		if p == rel {
			return nil
		}
		if w.ignored(p) {
			// An excluded directory may hold a file a "!" pattern
			// takes back (docker's exceptions): walk on.
			if d.IsDir() && !w.hasExceptions() {
				return fs.SkipDir
			}
			return nil
		}
		sub := strings.TrimPrefix(p, rel+"/")
		if rel == "." {
			sub = p
		}
		return w.entry(p, path.Join(name, sub))
	})
}

// entry writes one context entry rel under name, through tarentry: its
// parent opened through the context's root, rel's last name not
// followed, its header (owners and mode as --chown and --chmod say, no
// setuid or setgid bits without --chmod) and contents from the one
// descriptor; sockets, devices and FIFOs are not copied.
func (w *copyWriter) entry(rel, name string) error {
	if name == "" || w.written[name] {
		return nil
	}
	w.written[name] = true
	e, err := tarentry.OpenIn(w.root, rel)
	if err != nil {
		return explainOutside(err)
	}
	defer e.Close()
	switch e.Kind() {
	case unix.S_IFDIR, unix.S_IFLNK, unix.S_IFREG:
	default:
		return nil // sockets, devices, fifos: not copied
	}
	tw := &tarentry.Writer{TW: w.tw, WriteHeader: w.header, Content: io.MultiWriter(w.tw, w.sum),
		Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
			hdr := &tar.Header{Name: name, Uid: w.uid, Gid: w.gid, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
			if w.mode != nil {
				hdr.Mode = int64(*w.mode)
			}
			return hdr, nil
		}}
	err = tw.Write(e, name)
	if errors.Is(err, tarentry.ErrChanged) {
		return fmt.Errorf("%s changed while being copied", rel)
	}
	return err
}

// header writes hdr, and all of it but its times to the cache key's sum.
func (w *copyWriter) header(hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeReg && w.size != nil {
		if err := w.size.Add("/"+strings.TrimPrefix(hdr.Name, "/"), hdr.Size); err != nil {
			return fmt.Errorf("the layer is %w", err)
		}
	}
	fmt.Fprintf(w.sum, "%q %c %o %d:%d %q %d %d:%d\n", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Linkname, hdr.Size, hdr.Devmajor, hdr.Devminor)
	return w.tw.WriteHeader(hdr)
}

// addArchive extracts a local tar archive (plain or gzip) for ADD under
// dest; false when rel is not an archive.
func (w *copyWriter) addArchive(rel, dest string) (bool, error) {
	f, err := regfile.OpenIn(w.root, rel)
	if err != nil {
		return false, fmt.Errorf("ADD %s: %w", rel, err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(512)
	var r io.Reader = br
	if len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzipReader(br)
		if err != nil {
			return false, nil
		}
		r = zr
	} else if len(magic) < 262 || string(magic[257:262]) != "ustar" {
		return false, nil
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("ADD %s: %w", rel, err)
		}
		hdr.Name = path.Join(strings.TrimPrefix(dest, "/"), hdr.Name)
		if hdr.Typeflag == tar.TypeGNUSparse {
			// archive/tar reads a sparse file's holes as zeros: it is
			// written as the regular file it reads as (its holes kept
			// where the layer is staged and applied, its size counted
			// against Builder.layerSize).
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = path.Join(strings.TrimPrefix(dest, "/"), hdr.Linkname)
		}
		if err := w.header(hdr); err != nil {
			return false, err
		}
		if _, err := io.Copy(io.MultiWriter(w.tw, w.sum), tr); err != nil {
			return false, err
		}
	}
}

// ignoreFile is the context's .dockerignore, read once per build.
type ignoreFile struct {
	patterns   []string
	pm         *patternmatcher.PatternMatcher
	exceptions bool // a "!" pattern re-includes
}

// dockerignore reads the context's .dockerignore (through root) on the
// build's first COPY or ADD from the context, and returns it from then on.
func (bl *Builder) dockerignore(root *os.Root) (*ignoreFile, error) {
	if bl.ignore != nil {
		return bl.ignore, nil
	}
	ig, err := readIgnore(root)
	if err != nil {
		return nil, err
	}
	bl.ignore = ig
	return ig, nil
}

// readIgnore reads .dockerignore's patterns (at most MaxDockerignoreBytes;
// a FIFO or device there is refused, not waited on).
func readIgnore(root *os.Root) (*ignoreFile, error) {
	b, err := readBounded(root, ".dockerignore", ".dockerignore", MaxDockerignoreBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &ignoreFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	ig := &ignoreFile{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		ig.patterns = append(ig.patterns, l)
		ig.exceptions = ig.exceptions || strings.HasPrefix(l, "!")
	}
	if len(ig.patterns) > 0 {
		if ig.pm, err = patternmatcher.New(ig.patterns); err != nil {
			return nil, fmt.Errorf(".dockerignore: %w", err)
		}
	}
	return ig, nil
}

// ignored applies .dockerignore as the docker CLI does (moby's
// patternmatcher: "**" spans directories, "!" re-includes): a path is
// excluded when it or one of its parents matches.
func (w *copyWriter) ignored(rel string) bool {
	if w.ignore == nil || w.ignore.pm == nil {
		return false
	}
	ok, _ := w.ignore.pm.MatchesOrParentMatches(path.Clean(rel))
	return ok
}

func (w *copyWriter) hasExceptions() bool { return w.ignore != nil && w.ignore.exceptions }

func (w *copyWriter) notIgnored(ms []string) []string {
	var out []string
	for _, m := range ms {
		if !w.ignored(m) {
			out = append(out, m)
		}
	}
	return out
}

// lookup finds image path p in the stage's layers (newest first),
// honouring whiteouts and opaque directories; it follows no symlink, and a
// path it cannot read counts as absent.
func (w *copyWriter) lookup(p string) (fs.FileInfo, bool) {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	for i := len(w.layers) - 1; i >= 0; i-- {
		l := w.layers[i]
		for j := range parts {
			full := filepath.Join(append([]string{l}, parts[:j+1]...)...)
			var st unix.Stat_t
			if err := unix.Lstat(full, &st); err != nil {
				break
			}
			if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
				return nil, false
			}
			if j == len(parts)-1 {
				fi, err := os.Lstat(full)
				return fi, err == nil
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return nil, false
			}
		}
		if opaqueAny(l, parts) {
			return nil, false
		}
	}
	return nil, false
}

func opaqueAny(layer string, parts []string) bool {
	for j := range parts {
		var b [1]byte
		n, err := unix.Lgetxattr(filepath.Join(append([]string{layer}, parts[:j+1]...)...), "user.overlay.opaque", b[:])
		if err == nil && n == 1 && b[0] == 'y' {
			return true
		}
		if errors.Is(err, syscall.ENOENT) {
			return false
		}
	}
	return false
}

func (w *copyWriter) existsInImage(p string) bool {
	if path.Clean(p) == "/" {
		return true
	}
	_, ok := w.lookup(p)
	return ok
}

func (w *copyWriter) isDirInImage(p string) bool {
	fi, ok := w.lookup(p)
	return ok && fi.IsDir()
}

func gzipReader(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

// chownIDs resolves --chown (uid[:gid] or names from the image's
// /etc/passwd and /etc/group); empty is 0:0.
func (s *stage) chownIDs(spec string) (int, int, error) {
	if spec == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(spec, ":")
	w := &copyWriter{layers: s.layers}
	uid, err := w.id(u, "/etc/passwd")
	if err != nil {
		return 0, 0, err
	}
	gid := uid
	if hasGroup {
		if gid, err = w.id(g, "/etc/group"); err != nil {
			return 0, 0, err
		}
	}
	return uid, gid, nil
}

func (w *copyWriter) id(name, file string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	if fi, ok := w.lookup(file); ok && fi.Mode().IsRegular() {
		for i := len(w.layers) - 1; i >= 0; i-- {
			b, err := os.ReadFile(filepath.Join(w.layers[i], file))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				f := strings.Split(l, ":")
				if len(f) >= 3 && f[0] == name {
					return strconv.Atoi(f[2])
				}
			}
			break
		}
	}
	return 0, fmt.Errorf("--chown: no %q in the image's %s", name, file)
}
