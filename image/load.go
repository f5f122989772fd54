package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/regfile"
	"github.com/slopbox/slopbox/internal/tarentry"
	"github.com/slopbox/slopbox/internal/userns"
)

// Load imports every image in a `docker save` tarball, an OCI archive (a tar
// of an OCI layout) or an OCI layout directory, and returns their names.
func (s *Store) Load(ctx context.Context, path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if fi.IsDir() {
		// The layout is read once, through descriptors (tarTree), into an
		// archive on an open file: a directory a sandbox can write cannot
		// swap a symlink in between a check and a read, and the namespace's
		// root, which may not read root's files by name, reads the file.
		f, err := os.CreateTemp(s.path("tmp"), fmt.Sprintf("%d-load-", os.Getpid()))
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if err := tarTree(abs, f); err != nil {
			return nil, fmt.Errorf("load %s: %w", abs, err)
		}
		if userns.Inside() {
			return s.loadInside(ctx, abs, f)
		}
		return s.runHelperNames(ctx, helperRequest{Op: "load", Path: abs, FD: 5}, f)
	}
	if userns.Inside() {
		return s.loadInside(ctx, abs)
	}
	// Hand the helper an open file: as root, the namespace's root may not be
	// allowed to open it by name. A FIFO (or socket, or device) is refused
	// rather than waited on: an archive is read in several passes.
	f, err := regfile.Open(abs)
	if errors.Is(err, regfile.ErrNotRegular) {
		return nil, fmt.Errorf("load: %w (to load a stream, pipe it in: slopbox load < %s)", err, path)
	}
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	return s.runHelperNames(ctx, helperRequest{Op: "load", Path: abs, FD: 5}, f)
}

type namedImage struct {
	names []string
	img   v1.Image
}

// loadInside is Load; an archive is read from file when it is non-nil.
// Preconditions: inside the user namespace.
func (s *Store) loadInside(ctx context.Context, path string, file ...*os.File) ([]string, error) {
	var imgs []namedImage
	var err error
	if len(file) == 0 {
		f, err := regfile.Open(path)
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		defer f.Close()
		file = []*os.File{f}
	}
	fi, err := file[0].Stat()
	if err != nil {
		return nil, err
	}
	archive := io.NewSectionReader(file[0], 0, fi.Size())
	opener := func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(archive, 0, fi.Size())), nil }
	kind, err := sniffArchive(opener)
	switch {
	case err != nil:
	case kind == "docker":
		imgs, err = s.fromDockerArchive(opener)
	case kind == "oci":
		var dir string
		if dir, err = s.tempDir("load"); err == nil {
			defer os.RemoveAll(dir)
			if err = untarPlain(opener, dir); err == nil {
				imgs, err = s.fromLayout(dir)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return s.storeLoaded(ctx, path, imgs)
}

func (s *Store) storeLoaded(ctx context.Context, path string, imgs []namedImage) ([]string, error) {
	var loaded []string
	rep := newReporter(s.progress, s.logf, true)
	defer rep.wait()
	for _, ni := range imgs {
		if _, err := s.writeImage(ctx, ni.img, ni.names, "", rep); err != nil {
			return loaded, fmt.Errorf("load %s: %w", path, err)
		}
		loaded = append(loaded, ni.names...)
	}
	return loaded, nil
}

// sniffArchive tells a docker-save tarball (manifest.json) from an OCI
// archive (oci-layout) by reading the tar's table of contents.
func sniffArchive(opener tarball.Opener) (string, error) {
	f, err := opener()
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%w: no manifest.json or oci-layout entry", ErrBadArchive)
		}
		if err != nil {
			return "", fmt.Errorf("%w: %v (a compressed archive must be decompressed first)", ErrBadArchive, err)
		}
		switch filepath.Clean(h.Name) {
		case "manifest.json":
			return "docker", nil
		case "oci-layout":
			return "oci", nil
		}
	}
}

func (s *Store) fromDockerArchive(opener tarball.Opener) ([]namedImage, error) {
	// go-containerregistry reads manifest.json and each config whole:
	// their sizes in the archive are checked first.
	if n, err := tarEntrySize(opener, "manifest.json"); err != nil {
		return nil, err
	} else if n > MaxManifestBytes {
		return nil, tooLarge("the archive's manifest.json", n, MaxManifestBytes)
	}
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	var out []namedImage
	for _, d := range m {
		var names []string
		var tag *name.Tag
		for _, t := range d.RepoTags {
			r, err := name.NewTag(t)
			if err != nil {
				return nil, fmt.Errorf("%w: bad tag %q: %v", ErrBadArchive, t, err)
			}
			names = append(names, r.Name())
			tag = &r
		}
		if n, err := tarEntrySize(opener, d.Config); err != nil {
			return nil, err
		} else if n > MaxConfigBytes {
			return nil, tooLarge("the archive's config "+d.Config, n, MaxConfigBytes)
		}
		img, err := tarball.Image(opener, tag)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
		}
		if len(names) == 0 {
			names = []string{unnamed(img)}
		}
		out = append(out, namedImage{names, img})
	}
	return out, nil
}

func (s *Store) fromLayout(dir string) ([]namedImage, error) {
	// go-containerregistry reads index.json, manifests and configs whole:
	// their sizes on disk are checked first.
	if err := checkLayoutFile(dir, "index.json", "the layout's index.json", MaxManifestBytes); err != nil {
		return nil, err
	}
	manifest := func(h v1.Hash) error {
		return checkLayoutFile(dir, blobRel(h), "the layout's manifest "+h.String(), MaxManifestBytes)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	var out []namedImage
	for _, d := range im.Manifests {
		if err := manifest(d.Digest); err != nil {
			return nil, err
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if err := verifyRaw(child.RawManifest, d.Digest, "index"); err != nil {
				return nil, err
			}
			cm, err := child.IndexManifest()
			if err != nil {
				return nil, err
			}
			found := false
			for _, c := range cm.Manifests {
				if c.Platform == nil || c.Platform.Satisfies(HostPlatform()) {
					if err := manifest(c.Digest); err != nil {
						return nil, err
					}
					img, err := child.Image(c.Digest)
					if err == nil {
						err = verifyImage(img, c.Digest, dir)
					}
					if err != nil {
						return nil, err
					}
					out = append(out, namedImage{layoutNames(d, img), img})
					found = true
					break
				}
			}
			if !found {
				return nil, fmt.Errorf("no image for %s/%s in %s", HostPlatform().OS, HostPlatform().Architecture, d.Digest)
			}
			continue
		}
		img, err := idx.Image(d.Digest)
		if err == nil {
			err = verifyImage(img, d.Digest, dir)
		}
		if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
		}
		out = append(out, namedImage{layoutNames(d, img), img})
	}
	return out, nil
}

// verifyImage checks an OCI layout image's manifest bytes against the
// digest that names them, and its config (in layout dir, under
// MaxConfigBytes) against the manifest (layers are checked as they are
// stored). go-containerregistry's layout reader trusts the files it is
// given.
func verifyImage(img v1.Image, want v1.Hash, dir string) error {
	if err := verifyRaw(img.RawManifest, want, "manifest"); err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	if m.Config.Size > MaxConfigBytes {
		return tooLarge("the layout's config "+m.Config.Digest.String(), m.Config.Size, MaxConfigBytes)
	}
	if err := checkLayoutFile(dir, blobRel(m.Config.Digest), "the layout's config "+m.Config.Digest.String(), MaxConfigBytes); err != nil {
		return err
	}
	return verifyRaw(img.RawConfigFile, m.Config.Digest, "config")
}

// verifyRaw checks that the bytes raw returns have digest want.
func verifyRaw(raw func() ([]byte, error), want v1.Hash, what string) error {
	b, err := raw()
	if err != nil {
		return err
	}
	got, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if want.Algorithm == "sha256" && got != want {
		return fmt.Errorf("%w: the %s's bytes have digest %s, but it is named %s", ErrBadArchive, what, got, want)
	}
	return nil
}

// layoutNames reads an image's name from the annotations buildkit, skopeo
// and containerd write; a bare tag ("latest") is not a usable name.
func layoutNames(d v1.Descriptor, img v1.Image) []string {
	for _, k := range []string{"io.containerd.image.name", AnnotationRefName} {
		if n, ok := d.Annotations[k]; ok {
			if r, err := name.ParseReference(n); err == nil && n != "" && r.Context().RepositoryStr() != "library/"+n {
				return []string{r.Name()}
			}
		}
	}
	return []string{unnamed(img)}
}

// Unnamed says whether n is the name the store gives an image that has
// none (loaded or committed without a tag).
func Unnamed(n string) bool { return strings.HasPrefix(n, "localhost/unnamed@") }

func unnamed(img v1.Image) string {
	h, _ := img.Digest()
	return "localhost/unnamed@" + h.String()
}

// untarPlain unpacks an OCI archive (blobs and json only) into dir,
// refusing entries that are not plain files and directories.
func untarPlain(opener tarball.Opener, dir string) error {
	f, err := opener()
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadArchive, err)
		}
		p := filepath.Clean(h.Name)
		if filepath.IsAbs(p) || p == ".." || len(p) > 2 && p[:3] == "../" {
			return fmt.Errorf("%w: entry %q escapes the archive", ErrBadArchive, h.Name)
		}
		dst := filepath.Join(dir, p)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unexpected entry %q of type %c in an OCI archive", ErrBadArchive, h.Name, h.Typeflag)
		}
	}
}

// Save writes the named images as a `docker save` tarball to w.
func (s *Store) Save(refs []string, w io.Writer) error {
	p, err := layout.FromPath(s.path("oci"))
	if err != nil {
		return err
	}
	m := map[name.Reference]v1.Image{}
	for _, ref := range refs {
		d, err := s.resolveLocal(ref)
		if err != nil {
			return err
		}
		// The layout reader reads the manifest and config whole: their
		// sizes are checked first.
		if _, _, err := s.manifest(d.Digest.String()); err != nil {
			return fmt.Errorf("save %s: %w", ref, err)
		}
		h, err := v1.NewHash(d.Digest.String())
		if err != nil {
			return err
		}
		img, err := p.Image(h)
		if err != nil {
			return fmt.Errorf("save %s: %w", ref, err)
		}
		n, err := name.ParseReference(d.Annotations[AnnotationRefName])
		if err != nil {
			return fmt.Errorf("save %s: %w", ref, err)
		}
		m[n] = img
	}
	return tarball.MultiRefWrite(m, w)
}

// tarTree writes the regular files and directories under dir as a tar to
// w. dir is opened as an os.Root (no symlink in it takes a read outside),
// and each entry is written through tarentry: opened by its last name,
// not followed, its header from fstat of the descriptor it is read from,
// a file reopened without blocking (a FIFO swapped in is refused, not
// waited on), and no more bytes read than that header says.
func tarTree(dir string, w io.Writer) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := &tarentry.Writer{TW: tar.NewWriter(w), Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
		if fi.IsDir() {
			return &tar.Header{Name: name, Mode: 0o755}, nil
		}
		return &tar.Header{Name: name, Mode: 0o644}, nil
	}}
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%w: unexpected %s in an OCI layout", ErrBadArchive, rel)
		}
		e, err := tarentry.OpenIn(root, rel)
		if err != nil {
			return err
		}
		defer e.Close()
		if (e.Kind() == unix.S_IFDIR) != d.IsDir() || e.Kind() != unix.S_IFDIR && e.Kind() != unix.S_IFREG {
			return fmt.Errorf("%w: %s changed while being read", ErrBadArchive, rel)
		}
		err = tw.Write(e, rel)
		if errors.Is(err, tarentry.ErrChanged) {
			return fmt.Errorf("%w: %s changed while being read", ErrBadArchive, rel)
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.TW.Close()
}
