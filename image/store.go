package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/gofrs/flock"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	imgspecs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/userns"
)

// Sentinel errors, checked with errors.Is.
var (
	ErrNotFound   = errdefs.ErrNotFound.WithMessage("image not found")
	ErrBadRef     = errdefs.ErrInvalidArgument.WithMessage("invalid image reference")
	ErrBadArchive = errdefs.ErrInvalidArgument.WithMessage("not a docker-save tarball or OCI archive/layout")
)

// AnnotationRefName is the OCI annotation that names an index entry.
const AnnotationRefName = ocispec.AnnotationRefName

// annotationSource records the digest a tag resolved to at the registry
// (an index digest for multi-platform images), for the no-op re-pull check.
const annotationSource = "io.slopbox.source.digest"

// annotationParent is the id of the image an image was committed from
// (Docker's Parent), on its index entries.
const annotationParent = "io.slopbox.parent"

// Store is a local image store. It is safe for concurrent use by several
// processes.
type Store struct {
	root     string
	mapping  userns.Mapping
	logf     func(string, ...any)
	insecure map[string]bool
	progress Progress
	stall    time.Duration // see WithStallTimeout
	sess     *sessions     // see Hold
}

// Option configures a Store.
type Option func(*Store)

// WithLogger sends warnings and plain progress lines to f.
func WithLogger(f func(string, ...any)) Option { return func(s *Store) { s.logf = f } }

// WithInsecureRegistries allows plain HTTP for the named registries
// ("host:port"). Loopback registries always may use plain HTTP.
func WithInsecureRegistries(regs ...string) Option {
	return func(s *Store) {
		for _, r := range regs {
			s.insecure[r] = true
		}
	}
}

// WithProgress selects how pulls report progress (default ProgressNone).
func WithProgress(p Progress) Option { return func(s *Store) { s.progress = p } }

// DefaultRoot is /var/lib/slopbox for root and $XDG_DATA_HOME/slopbox
// (default ~/.local/share/slopbox) for other users.
func DefaultRoot() string {
	if os.Geteuid() == 0 {
		return "/var/lib/slopbox"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "slopbox")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), fmt.Sprintf("slopbox-%d", os.Geteuid()))
	}
	return filepath.Join(home, ".local", "share", "slopbox")
}

// Open opens (creating if needed) the store at root.
func Open(root string, opts ...Option) (*Store, error) {
	m, err := userns.Current()
	if err != nil {
		return nil, err
	}
	s := &Store{root: root, mapping: m, logf: func(string, ...any) {}, insecure: map[string]bool{}, sess: &sessions{}}
	for _, o := range opts {
		o(s)
	}
	if err := s.init(); err != nil {
		return nil, fmt.Errorf("open image store %s: %w", root, err)
	}
	return s, nil
}

// Root returns the store's root directory.
func (s *Store) Root() string { return s.root }

// Mapping returns the id mapping layers are extracted with.
func (s *Store) Mapping() userns.Mapping { return s.mapping }

func (s *Store) init() error {
	for _, d := range []string{"", "oci/blobs/sha256", "layers/sha256", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.root, d), 0o700); err != nil {
			return err
		}
	}
	// Layers are extracted under tmp/ and renamed into layers/.
	markTopDir(s.path("tmp"))
	if _, err := os.Stat(s.path("oci", "oci-layout")); errors.Is(err, fs.ErrNotExist) {
		if err := writeFileAtomic(s, s.path("oci", "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
			return err
		}
	}
	if _, err := os.Stat(s.path("oci", "index.json")); errors.Is(err, fs.ErrNotExist) {
		if err := s.writeIndex(&ocispec.Index{Versioned: imgspecs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 && !userns.Inside() {
		if err := searchable(s.root); err != nil {
			return err
		}
		// Leases name sandboxes: 0755 before, private now, and the
		// helper's, which reads them for GC (see Lease).
		if err := os.Chmod(s.path("leases"), 0o700); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if uid, gid := s.helperIDs(); uid >= 0 {
			if ents, err := os.ReadDir(s.path("leases")); err == nil {
				os.Lchown(s.path("leases"), uid, gid)
				for _, e := range ents {
					os.Lchown(s.path("leases", e.Name()), uid, gid)
				}
			}
		}
		// Extraction runs as root of a user namespace, which is an
		// unprivileged host id: hand it the store.
		uid, gid := s.mapping.UIDs[0].HostID, s.mapping.GIDs[0].HostID
		for _, d := range []string{"", "oci", "oci/blobs", "oci/blobs/sha256", "oci/oci-layout", "oci/index.json", "layers", "layers/sha256", "tmp"} {
			if err := os.Lchown(s.path(d), int(uid), int(gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// searchable checks that every ancestor of dir lets other users through:
// as root, the store is written by root of a user namespace, which is an
// unprivileged host id.
func searchable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v), so the user namespace that writes the store cannot reach it: chmod o+x %s or choose another --root", d, fi.Mode().Perm(), d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

func (s *Store) blobPath(h v1.Hash) string {
	return s.path("oci", "blobs", h.Algorithm, h.Hex)
}

// LayerDir is where the layer with diffID d is extracted.
func (s *Store) LayerDir(d v1.Hash) string { return s.path("layers", d.Algorithm, d.Hex) }

// LayersRoot is the directory the store's own layers are extracted under
// (LayerDir's <root>/layers/<algorithm>/<hex>).
func (s *Store) LayersRoot() string { return s.path("layers") }

// tempDir makes a staging directory named after this process so that a
// later garbage collection can tell abandoned ones from live ones.
func (s *Store) tempDir(kind string) (string, error) {
	return os.MkdirTemp(s.path("tmp"), fmt.Sprintf("%d-%s-", os.Getpid(), kind))
}

// lockShared takes the store lock shared (writers) or exclusive (GC).
func (s *Store) lock(exclusive bool) (*flock.Flock, error) {
	l := flock.New(s.path("lock"))
	var err error
	if exclusive {
		err = l.Lock()
	} else {
		err = l.RLock()
	}
	if err != nil {
		return nil, fmt.Errorf("lock store: %w", err)
	}
	return l, nil
}

func (s *Store) readIndex() (*ocispec.Index, error) {
	b, err := os.ReadFile(s.path("oci", "index.json"))
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("corrupt %s: %w", s.path("oci", "index.json"), err)
	}
	return &idx, nil
}

func (s *Store) writeIndex(idx *ocispec.Index) error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s, s.path("oci", "index.json"), b)
}

// updateIndex applies f to index.json under the index lock.
func (s *Store) updateIndex(f func(*ocispec.Index) error) error {
	l := flock.New(s.path("index.lock"))
	if err := l.Lock(); err != nil {
		return fmt.Errorf("lock index: %w", err)
	}
	defer l.Unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := f(idx); err != nil {
		return err
	}
	return s.writeIndex(idx)
}

// writeFileAtomic writes b to path via a synced temporary file and rename.
func writeFileAtomic(s *Store, path string, b []byte) error {
	return atomicfile.Write(path, bytes.NewReader(b), 0o644)
}

// ParseReference parses an image reference the way docker does
// (docker.io/library defaults) and names the registry as insecure when it was
// allowed by WithInsecureRegistries.
func (s *Store) ParseReference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil && ref != "" && !strings.Contains(ref, "/") {
		// go-containerregistry wants two characters in a repository
		// name; docker takes x as docker.io/library/x.
		if lr, lerr := name.ParseReference("library/" + ref); lerr == nil {
			r, err, ref = lr, nil, "library/"+ref
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadRef, ref, err)
	}
	if s.insecure[r.Context().RegistryStr()] {
		r, err = name.ParseReference(ref, name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadRef, ref, err)
		}
	}
	return r, nil
}

// Summary is one line of `slopbox images`.
type Summary struct {
	Name   string `json:"name"`
	ID     string `json:"id"` // config digest, as docker shows it
	Digest string `json:"digest"`
	// Source is the registry digest the name was pulled at ("" for an
	// image made here: built, committed, imported or loaded).
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"` // compressed bytes of the layers
	// Labels are the image config's (docker images --filter label=).
	Labels map[string]string `json:"labels,omitempty"`
}

// List returns the images in the store, sorted by name.
func (s *Store) List() ([]Summary, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, d := range idx.Manifests {
		m, cfg, err := s.manifest(d.Digest.String())
		if err != nil {
			name := d.Annotations[AnnotationRefName]
			return nil, fmt.Errorf("image %s: %w (remove it: slopbox rmi %s)", name, err, DockerName(name))
		}
		var size int64
		for _, l := range m.Layers {
			size += l.Size
		}
		out = append(out, Summary{Name: d.Annotations[AnnotationRefName], ID: m.Config.Digest.String(), Digest: d.Digest.String(), Source: d.Annotations[annotationSource], Created: cfg.Created.Time, Size: size, Labels: cfg.Config.Labels})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// resolveLocal finds ref in the index: by full name, by digest, or by a
// (possibly abbreviated) image id.
func (s *Store) resolveLocal(ref string) (ocispec.Descriptor, error) {
	idx, err := s.readIndex()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	want := ref
	if r, err := s.ParseReference(ref); err == nil {
		want = r.Name()
	}
	for _, d := range idx.Manifests {
		if d.Annotations[AnnotationRefName] == want {
			return d, nil
		}
	}
	// By digest or id prefix (at least 12 hex digits, like docker).
	hex := strings.TrimPrefix(ref, "sha256:")
	if len(hex) >= 12 && isHex(hex) {
		for _, d := range idx.Manifests {
			if strings.HasPrefix(d.Digest.Encoded(), hex) {
				return d, nil
			}
			if m, _, err := s.manifest(d.Digest.String()); err == nil && strings.HasPrefix(m.Config.Digest.Encoded(), hex) {
				return d, nil
			}
		}
	}
	return ocispec.Descriptor{}, fmt.Errorf("%w: %s (pull it with `slopbox pull %s` or load it with `slopbox load -i FILE`)", ErrNotFound, ref, ref)
}

func isHex(s string) bool {
	_, err := strconv.ParseUint(s[:min(len(s), 12)], 16, 64)
	return err == nil && strings.Trim(s, "0123456789abcdef") == ""
}

func (s *Store) manifest(digest string) (*ocispec.Manifest, *v1.ConfigFile, error) {
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.readBlob(h, "manifest", MaxManifestBytes)
	if err != nil {
		return nil, nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("parse manifest %s: %w", digest, err)
	}
	ch, err := v1.NewHash(m.Config.Digest.String())
	if err != nil {
		return nil, nil, err
	}
	cb, err := s.readBlob(ch, "config", MaxConfigBytes)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cb))
	if err != nil {
		return nil, nil, fmt.Errorf("parse config %s: %w", ch, err)
	}
	return &m, cfg, nil
}

// Image is a resolved local image, ready to run.
type Image struct {
	Name   string
	Digest string // manifest digest
	ID     string // config digest
	Config *v1.ConfigFile
	// Layers are the extracted layer directories, oldest first.
	Layers []string
}

// Get resolves ref in the store and checks that every layer is extracted.
func (s *Store) Get(ref string) (*Image, error) {
	d, err := s.resolveLocal(ref)
	if err != nil {
		return nil, err
	}
	m, cfg, err := s.manifest(d.Digest.String())
	if err != nil {
		return nil, err
	}
	img := &Image{Name: d.Annotations[AnnotationRefName], Digest: d.Digest.String(), ID: m.Config.Digest.String(), Config: cfg}
	for _, diff := range cfg.RootFS.DiffIDs {
		dir := s.LayerDir(diff)
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("image %s: layer %s is not extracted (re-run `slopbox pull`): %w", ref, diff, err)
		}
		img.Layers = append(img.Layers, dir)
	}
	return img, nil
}

// Tag gives the image src the additional name dst.
func (s *Store) Tag(src, dst string) error {
	d, err := s.resolveLocal(src)
	if err != nil {
		return err
	}
	r, err := s.ParseReference(dst)
	if err != nil {
		return err
	}
	return s.updateIndex(func(idx *ocispec.Index) error {
		// Not its source: the new name's repository never had it
		// (RepoDigests list only a repository it was pulled from).
		setRef(idx, d, r.Name(), "")
		return nil
	})
}

// setRef points name at d, replacing any entry of that name.
func setRef(idx *ocispec.Index, d ocispec.Descriptor, refName, source string) {
	parent := d.Annotations[annotationParent] // a name given to an image keeps its parent
	d.Annotations = map[string]string{AnnotationRefName: refName}
	if parent != "" {
		d.Annotations[annotationParent] = parent
	}
	if source != "" {
		d.Annotations[annotationSource] = source
	}
	kept := idx.Manifests[:0]
	for _, m := range idx.Manifests {
		if m.Annotations[AnnotationRefName] != refName {
			kept = append(kept, m)
		}
	}
	idx.Manifests = append(kept, d)
}

// Remove deletes the name ref (or, given an id or digest, every name of that
// image), then garbage-collects what no name references.
// It refuses, wrapping ErrInUse and naming them, while sandboxes use the
// image's layers (see Lease).
func (s *Store) Remove(ref string) ([]string, error) { return s.remove(ref, false) }

// ForceRemove is Remove for an image sandboxes still use: the name goes,
// and the layers they hold stay until the last of them is removed.
func (s *Store) ForceRemove(ref string) ([]string, error) { return s.remove(ref, true) }

func (s *Store) remove(ref string, force bool) ([]string, error) {
	d, err := s.resolveLocal(ref)
	if err != nil {
		return nil, err
	}
	byName := false
	if r, err := s.ParseReference(ref); err == nil && d.Annotations[AnnotationRefName] == r.Name() {
		byName = true
	}
	if !force {
		// Only layers no image left after the removal has can be freed:
		// a sandbox holding another image's layers (a shared base, the
		// same image under another name) does not keep this name.
		kept := map[string]bool{}
		if idx, err := s.readIndex(); err == nil {
			for _, m := range idx.Manifests {
				if byName && m.Annotations[AnnotationRefName] == d.Annotations[AnnotationRefName] || !byName && m.Digest == d.Digest {
					continue
				}
				if _, cfg, err := s.manifest(m.Digest.String()); err == nil {
					for _, h := range cfg.RootFS.DiffIDs {
						kept[h.Hex] = true
					}
				}
			}
		}
		if err := s.inUse(ref, d.Digest.String(), kept); err != nil {
			return nil, err
		}
	}
	var removed []string
	err = s.updateIndex(func(idx *ocispec.Index) error {
		kept := idx.Manifests[:0]
		for _, m := range idx.Manifests {
			drop := m.Digest == d.Digest
			if byName {
				drop = m.Annotations[AnnotationRefName] == d.Annotations[AnnotationRefName]
			}
			if drop {
				removed = append(removed, m.Annotations[AnnotationRefName])
			} else {
				kept = append(kept, m)
			}
		}
		idx.Manifests = kept
		return nil
	})
	if err != nil {
		return nil, err
	}
	return removed, s.GC()
}

// Details are what the store knows of one image; docker image inspect
// shows them in Docker's shape (service.ImageInspect).
type Details struct {
	ID     string // the config's digest (Docker's image id)
	Digest string // the manifest's
	// MediaType and ManifestSize are the manifest's.
	MediaType    string
	ManifestSize int64
	Names        []string // the store's names of it (index.docker.io/library/alpine:3), sorted
	// Sources are the registry digests its names were pulled at, by
	// name (an index digest for a multi-platform image); a name that was
	// built, committed, imported or loaded has none.
	Sources                   map[string]string
	Created                   time.Time
	Architecture, Variant, OS string
	Author                    string
	Config                    v1.Config
	RootFS                    v1.RootFS
	Size                      int64 // its layers', compressed
	Layers                    []ocispec.Descriptor
	Container                 string // the sandbox a commit made it from
	// Parent is the image a commit or build made it from (Docker's local
	// Parent), "" for one pulled or loaded.
	Parent string
	// ContainerConfig is a committed image's container_config, nil
	// without one.
	ContainerConfig *v1.Config
}

// Inspect returns what the store knows of ref.
func (s *Store) Inspect(ref string) (*Details, error) {
	d, err := s.resolveLocal(ref)
	if err != nil {
		return nil, err
	}
	m, cfg, err := s.manifest(d.Digest.String())
	if err != nil {
		return nil, err
	}
	var size int64
	for _, l := range m.Layers {
		size += l.Size
	}
	idx, err := s.readIndex()
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", ref, err)
	}
	out := &Details{
		ID: m.Config.Digest.String(), Digest: d.Digest.String(), MediaType: string(d.MediaType), ManifestSize: d.Size, Created: cfg.Created.Time,
		Architecture: cfg.Architecture, Variant: cfg.Variant, OS: cfg.OS, Author: cfg.Author,
		Config: cfg.Config, RootFS: cfg.RootFS, Size: size, Layers: m.Layers, Container: cfg.Container,
		Parent: d.Annotations[annotationParent], ContainerConfig: s.containerConfig(m),
	}
	for _, e := range idx.Manifests {
		if e.Digest != d.Digest {
			continue
		}
		name := e.Annotations[AnnotationRefName]
		out.Names = append(out.Names, name)
		if src := e.Annotations[annotationSource]; src != "" {
			if out.Sources == nil {
				out.Sources = map[string]string{}
			}
			out.Sources[name] = src
		}
	}
	sort.Strings(out.Names)
	return out, nil
}

// containerConfig is the container_config of a committed image's config
// (Docker's), nil when it has none.
func (s *Store) containerConfig(m *ocispec.Manifest) *v1.Config {
	h, err := v1.NewHash(m.Config.Digest.String())
	if err != nil {
		return nil
	}
	b, err := s.readBlob(h, "config", MaxConfigBytes)
	if err != nil {
		return nil
	}
	var c struct {
		ContainerConfig *v1.Config `json:"container_config"`
	}
	json.Unmarshal(b, &c)
	return c.ContainerConfig
}

// pidAlive reports whether a process with this pid exists.
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// DockerName is a name as the store keeps it (index.docker.io/library/
// alpine:latest) as Docker prints it (alpine:latest): Docker Hub's
// registry and its library/ namespace left out, other names unchanged.
func DockerName(n string) string {
	rest, ok := strings.CutPrefix(n, "index.docker.io/")
	if !ok {
		if rest, ok = strings.CutPrefix(n, "docker.io/"); !ok {
			return n
		}
	}
	if r, ok := strings.CutPrefix(rest, "library/"); ok && !strings.Contains(r, "/") {
		return r
	}
	return rest
}
