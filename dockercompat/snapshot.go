package dockercompat

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dsnet/compress/bzip2"
	"github.com/ulikunitz/xz"

	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/regfile"
	"github.com/slopbox/slopbox/internal/tarentry"
)

// Workspace snapshots (SlopCodeBench's Snapshot.from_directory, reference
// §1.12), with what upstream lost kept:
//   - every symlink is stored as a symlink, never followed, whether it
//     points at a file, a directory, nothing, or out of the directory
//     (upstream silently dropped symlinks to directories);
//   - file modes (with setuid, setgid and sticky bits), mtimes (whole
//     seconds) and numeric owners are kept; each stored entry's parent
//     directories are stored too, with their modes. Empty directories are
//     not stored, as upstream;
//   - entries are in walk order (names sorted in each directory) and
//     gzip headers carry no name or time, so the same tree gives the same
//     bytes;
//   - an unreadable file or directory fails the snapshot (upstream's
//     os.walk skipped unreadable directories silently);
//   - sockets, devices and fifos are not archived (Skipped).
// Files are read through an os.Root, so nothing outside the directory is
// ever opened, even if the tree changes during the walk.

// ArchiveName is the base name of a snapshot written without a save
// directory (upstream's DEFAULT_ARCHIVE_NAME).
const ArchiveName = "slop_code_snapshot"

// DefaultIgnoreGlobs are SnapshotConfig.ignore_globs' default.
var DefaultIgnoreGlobs = []string{"*.pyc", "venv/*", ".venv/*", ".evaluation_tests/*"}

// SnapshotOptions say what a snapshot keeps and how it is compressed.
type SnapshotOptions struct {
	// Keep: when empty, every file not ignored is kept; otherwise only
	// files matching one of these globs.
	Keep []string
	// Ignore is used exactly as given. Unlike upstream's from_directory,
	// an empty list ignores nothing: it is not replaced by defaults.
	// A directory whose path plus "/" matches is not entered.
	Ignore []string
	// Compression is gz (the default when empty), bz2, xz or none, in
	// any case.
	Compression string
}

// SnapshotOptions are what the spec's snapshot block describes:
// keep_globs, get_ignore_globs(assets) (ignore_globs plus tests/assets
// and the static assets' save paths) and compression.
func (s *Spec) SnapshotOptions(assets []StaticAsset) SnapshotOptions {
	return SnapshotOptions{Keep: s.Snapshot.KeepGlobs, Ignore: s.IgnoreGlobs(assets), Compression: s.Snapshot.Compression}
}

// DefaultSnapshotOptions are the options of a spec with no snapshot
// block.
func DefaultSnapshotOptions() SnapshotOptions {
	s := &Spec{Snapshot: Snapshot{IgnoreGlobs: DefaultIgnoreGlobs, Compression: "gz"}}
	return s.SnapshotOptions(nil)
}

// SnapshotExt is the archive extension for a compression: .tar.gz,
// .tar.bz2, .tar.xz or .tar.
func SnapshotExt(compression string) (string, error) {
	c, err := normCompression(compression)
	if err != nil {
		return "", err
	}
	if c == "none" {
		return ".tar", nil
	}
	return ".tar." + c, nil
}

func normCompression(c string) (string, error) {
	switch c = strings.ToLower(c); c {
	case "":
		return "gz", nil
	case "gz", "bz2", "xz", "none":
		return c, nil
	}
	return "", fmt.Errorf("snapshot: unsupported compression %q: use gz, bz2, xz or none", c)
}

// SnapshotArchiveName is upstream's name for an archive of dir in a save
// directory: <YYYYmmddTHHMMSS>.<8 hex>.<base of dir><ext>.
func SnapshotArchiveName(dir, compression string, now time.Time) (string, error) {
	ext, err := SnapshotExt(compression)
	if err != nil {
		return "", err
	}
	var b [4]byte
	rand.Read(b[:])
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	base := filepath.Base(abs)
	if base == string(filepath.Separator) {
		base = "root"
	}
	return now.Format("20060102T150405") + "." + hex.EncodeToString(b[:]) + "." + base + ext, nil
}

// SnapshotResult is what a snapshot stored and left out, as paths
// relative to the directory.
type SnapshotResult struct {
	Files   []string // files and symlinks stored (matched_paths)
	Ignored []string // files matching an ignore glob, and pruned directories with a trailing "/" (other_paths)
	Skipped []string // sockets, devices and fifos: not archived
}

// WriteSnapshot writes a tar archive of dir to w, compressed as opts say.
// On error, what was written to w is not a valid archive.
func WriteSnapshot(dir string, opts SnapshotOptions, w io.Writer) (*SnapshotResult, error) {
	return writeSnapshot(dir, opts, w, nil)
}

// SnapshotToFile writes the snapshot to file through a temporary file
// beside it, renamed into place only on success: a failed snapshot
// leaves no partial archive, and an existing file is replaced only by a
// complete one. If file is inside dir, neither it nor the temporary file
// is archived. The archive is created with mode 0600. No symlink is
// followed in file or its directories (atomicfile.CreateOutput), which a
// sandbox may have planted: such a path is refused with an
// *atomicfile.SymlinkError.
func SnapshotToFile(dir string, opts SnapshotOptions, file string) (*SnapshotResult, error) {
	if _, err := normCompression(opts.Compression); err != nil {
		return nil, err
	}
	f, err := atomicfile.CreateOutput(file, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var skip []os.FileInfo
	if fi, err := f.Stat(); err == nil {
		skip = append(skip, fi)
	}
	if fi := f.Previous(); fi != nil {
		skip = append(skip, fi)
	}
	res, err := writeSnapshot(dir, opts, f, skip)
	if err != nil {
		return nil, err
	}
	if err := f.Commit(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return res, nil
}

// compressor wraps w as compression says.
func compressor(compression string, w io.Writer) (io.WriteCloser, error) {
	c, err := normCompression(compression)
	if err != nil {
		return nil, err
	}
	switch c {
	case "gz":
		return gzip.NewWriter(w), nil // no name, zero time: reproducible
	case "bz2":
		return bzip2.NewWriter(w, &bzip2.WriterConfig{Level: bzip2.DefaultCompression})
	case "xz":
		return xz.NewWriter(w)
	}
	return nopWriteCloser{w}, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// tarMode is a FileMode's permission and special bits as tar stores them.
func tarMode(m fs.FileMode) int64 {
	out := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

// walker is one walk of a directory, shared by snapshots and by reading a
// directory for a diff.
type walker struct {
	root         *os.Root
	keep, ignore globSet
	skip         []os.FileInfo
	res          SnapshotResult
}

func openWalker(dir string, opts SnapshotOptions) (*walker, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("snapshot: %s is not a directory", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &walker{root: root, keep: compileGlobs(opts.Keep), ignore: compileGlobs(opts.Ignore)}, nil
}

// walk calls dirFn for each directory entered (not the top) and fn for
// each kept non-directory, in order; fn opens regular files itself.
func (w *walker) walk(dirFn func(rel string, fi fs.FileInfo) error, fn func(rel string, fi fs.FileInfo) error) error {
	return fs.WalkDir(w.root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("snapshot: %s: %w", filepath.Join(w.root.Name(), rel), unwrapPathError(err))
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("snapshot: %s: %w", filepath.Join(w.root.Name(), rel), unwrapPathError(err))
		}
		for _, s := range w.skip {
			if os.SameFile(s, fi) {
				return nil
			}
		}
		if d.IsDir() {
			if w.ignore.match(rel + "/") {
				w.res.Ignored = append(w.res.Ignored, rel+"/")
				return fs.SkipDir
			}
			if dirFn != nil {
				return dirFn(rel, fi)
			}
			return nil
		}
		if w.ignore.match(rel) {
			w.res.Ignored = append(w.res.Ignored, rel)
			return nil
		}
		if len(w.keep) > 0 && !w.keep.match(rel) {
			return nil
		}
		if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			w.res.Skipped = append(w.res.Skipped, rel)
			return nil
		}
		w.res.Files = append(w.res.Files, rel)
		return fn(rel, fi)
	})
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openEntry opens rel (tarentry.OpenIn: its last name not followed),
// which lstat said fi is; it must still be that inode, of that type.
func (w *walker) openEntry(rel string, fi fs.FileInfo) (*tarentry.Entry, error) {
	e, err := tarentry.OpenIn(w.root, rel)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %s: %w", filepath.Join(w.root.Name(), rel), unwrapPathError(err))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Dev != e.Stat().Dev || st.Ino != e.Stat().Ino || e.Info().Mode().Type() != fi.Mode().Type() {
		e.Close()
		return nil, fmt.Errorf("snapshot: %s: changed during the snapshot", filepath.Join(w.root.Name(), rel))
	}
	return e, nil
}

// reopen opens the regular file e for reading (tarentry.Entry.Reopen:
// without blocking, the inode opened).
func (w *walker) reopen(e *tarentry.Entry, rel string) error {
	err := e.Reopen()
	if errors.Is(err, tarentry.ErrChanged) {
		return fmt.Errorf("snapshot: %s: changed during the snapshot", filepath.Join(w.root.Name(), rel))
	}
	if err != nil {
		return fmt.Errorf("snapshot: %s: %w", filepath.Join(w.root.Name(), rel), unwrapPathError(err))
	}
	return nil
}

func header(rel string, fi fs.FileInfo) *tar.Header {
	h := &tar.Header{Name: rel, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime().Truncate(time.Second)}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	return h
}

// pendingDir is a directory entered, opened, not yet stored: its header
// is written (from its descriptor's fstat) when something under it is.
type pendingDir struct {
	rel string
	e   *tarentry.Entry // nil once written
}

// pendingDirs are the directories entered down to the walk's place.
type pendingDirs []pendingDir

// pop closes and drops the directories rel is not under ("": all).
func (ds *pendingDirs) pop(rel string) {
	for len(*ds) > 0 && (rel == "" || !strings.HasPrefix(rel, (*ds)[len(*ds)-1].rel+"/")) {
		if e := (*ds)[len(*ds)-1].e; e != nil {
			e.Close()
		}
		*ds = (*ds)[:len(*ds)-1]
	}
}

// flush writes the headers of the directories not yet written.
func (ds pendingDirs) flush(tw *tarentry.Writer) error {
	for i := range ds {
		if ds[i].e == nil {
			continue // written
		}
		err := tw.Write(ds[i].e, ds[i].rel)
		ds[i].e.Close()
		ds[i].e = nil
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

func writeSnapshot(dir string, opts SnapshotOptions, out io.Writer, skip []os.FileInfo) (*SnapshotResult, error) {
	cw, err := compressor(opts.Compression, out)
	if err != nil {
		return nil, err
	}
	w, err := openWalker(dir, opts)
	if err != nil {
		return nil, err
	}
	defer w.root.Close()
	w.skip = skip
	tw := tar.NewWriter(cw)
	tw2 := &tarentry.Writer{TW: tw, Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
		return header(name, fi), nil
	}}
	// Directories are stored when something under them is, just before it.
	var dirs pendingDirs
	defer dirs.pop("")
	err = w.walk(func(rel string, fi fs.FileInfo) error {
		dirs.pop(rel)
		e, err := w.openEntry(rel, fi)
		if err != nil {
			return err
		}
		dirs = append(dirs, pendingDir{rel, e})
		return nil
	}, func(rel string, fi fs.FileInfo) error {
		dirs.pop(rel)
		if err := dirs.flush(tw2); err != nil {
			return err
		}
		e, err := w.openEntry(rel, fi)
		if err != nil {
			return err
		}
		defer e.Close()
		if e.Kind() == syscall.S_IFREG {
			if err := w.reopen(e, rel); err != nil {
				return err
			}
		}
		err = tw2.Write(e, rel)
		if errors.Is(err, io.EOF) {
			err = errors.New("shrank while being read")
		}
		if err != nil {
			return fmt.Errorf("snapshot: %s: %w", filepath.Join(dir, rel), unwrapPathError(err))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if err := cw.Close(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &w.res, nil
}

// Entry is one file or symlink of a snapshot (directories are not
// entries).
type Entry struct {
	Path     string
	Symlink  bool
	Mode     int64  // permission and special bits, as tar stores them
	Linkname string // a symlink's target
	Size     int64
	Hash     []byte // a file's SHA-256
	Binary   bool   // a file's contents are binary (isBinary)
	// Data is a text file's contents, for its line diff, when it is at
	// most MaxDiffText bytes; nil for a larger or binary file, which is
	// compared by Hash alone.
	Data []byte
}

// MaxDiffText is the most a snapshot keeps of a text file for its line
// diff: a file is read as a stream, hashed, and kept only up to this, so
// that the memory of a diff does not grow with the size of its files (a
// sandbox can make a sparse file of terabytes for free).
const MaxDiffText = 1 << 20

// read fills in e's Size, Hash, Binary and Data from its contents.
func (e *Entry) read(r io.Reader) error {
	h := sha256.New()
	var head []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		h.Write(chunk)
		e.Size += int64(n)
		if !e.Binary && bytes.IndexByte(chunk, 0) >= 0 {
			e.Binary = true
		}
		if !e.Binary && len(head) <= MaxDiffText {
			head = append(head, chunk[:min(n, MaxDiffText+1-len(head))]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	e.Hash = h.Sum(nil)
	e.Binary = e.Binary || isBinary(head)
	if !e.Binary && e.Size <= MaxDiffText {
		e.Data = head
		if e.Data == nil {
			e.Data = []byte{}
		}
	}
	return nil
}

// ReadSnapshot reads the files and symlinks of what src names: a snapshot
// archive (tar, plain or compressed with gzip, bzip2 or xz, recognised by
// its magic bytes), or a directory, read as a snapshot with opts would
// store it. Paths are relative, cleaned, without a leading "./".
func ReadSnapshot(src string, opts SnapshotOptions) (map[string]*Entry, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if fi.IsDir() {
		return readDir(src, opts)
	}
	// An archive that is a FIFO (or socket, device) is refused, not
	// waited on.
	f, err := regfile.Open(src)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	m, err := ReadArchive(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	return m, nil
}

func readDir(dir string, opts SnapshotOptions) (map[string]*Entry, error) {
	w, err := openWalker(dir, opts)
	if err != nil {
		return nil, err
	}
	defer w.root.Close()
	m := map[string]*Entry{}
	err = w.walk(nil, func(rel string, fi fs.FileInfo) error {
		te, err := w.openEntry(rel, fi)
		if err != nil {
			return err
		}
		defer te.Close()
		e := &Entry{Path: rel, Mode: tarMode(te.Info().Mode())}
		if te.Kind() == syscall.S_IFLNK {
			e.Symlink, e.Linkname = true, te.Link()
			m[rel] = e
			return nil
		}
		if err := w.reopen(te, rel); err != nil {
			return err
		}
		if err := e.read(io.LimitReader(te.File(), te.Stat().Size)); err != nil {
			return fmt.Errorf("snapshot: %s: %w", filepath.Join(dir, rel), unwrapPathError(err))
		}
		e.Mode = tarMode(te.Info().Mode())
		m[rel] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ReadArchive reads the files and symlinks of a tar stream, plain or
// compressed with gzip, bzip2 or xz. A hard link gets its target's
// contents; a later entry of a path replaces an earlier one, as on
// extraction.
func ReadArchive(r io.Reader) (map[string]*Entry, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(6)
	var in io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer z.Close()
		in = z
	case bytes.HasPrefix(magic, []byte("BZh")):
		z, err := bzip2.NewReader(br, nil)
		if err != nil {
			return nil, fmt.Errorf("bzip2: %w", err)
		}
		defer z.Close()
		in = z
	case bytes.Equal(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		z, err := xz.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("xz: %w", err)
		}
		in = z
	}
	tr := tar.NewReader(in)
	m := map[string]*Entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a readable snapshot archive: %w", err)
		}
		name := cleanName(h.Name)
		if name == "" {
			continue
		}
		e := &Entry{Path: name, Mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeReg: // Reader.Next reports the old TypeRegA as TypeReg
			if err := e.read(tr); err != nil {
				return nil, fmt.Errorf("not a readable snapshot archive: %s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			e.Symlink, e.Linkname = true, h.Linkname
		case tar.TypeLink:
			t, ok := m[cleanName(h.Linkname)]
			if !ok || t.Symlink {
				continue
			}
			e.Data, e.Size, e.Hash, e.Binary = t.Data, t.Size, t.Hash, t.Binary
		default:
			continue // directories and special files are not compared
		}
		m[name] = e
	}
	return m, nil
}

func cleanName(n string) string {
	n = strings.TrimLeft(path.Clean("/"+n), "/")
	if n == "" || n == "." {
		return ""
	}
	return n
}
