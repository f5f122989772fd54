package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/gofrs/flock"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// Named volumes (docker volume, -v NAME:/path, --mount type=volume) are
// directories kept under the state root, <root>/volumes/NAME/_data, beside
// their volume.json. A sandbox mounts _data as a bind mount: a volume in
// use is one a sandbox's recorded mounts name, running or not.

// Volume errors, checked with errors.Is.
var (
	ErrVolumeNotFound = errdefs.ErrNotFound.WithMessage("no such volume")
	ErrVolumeInUse    = errdefs.ErrConflict.WithMessage("volume is in use")
	ErrVolumeName     = errdefs.ErrInvalidArgument.WithMessage("invalid volume name")
)

// Volume describes a named volume in Docker's shape.
type Volume struct {
	Name       string
	Driver     string
	Mountpoint string
	CreatedAt  time.Time
	Labels     map[string]string
	Options    map[string]string
	// Anonymous: made for a container's -v /path with no name (prune
	// removes those by default).
	Anonymous bool `json:",omitempty"`
}

// volumeName is Docker's: [a-zA-Z0-9][a-zA-Z0-9_.-]+.
var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

const volumeMeta = "volume.json"

func (b *Backend) volumesDir() string { return filepath.Join(b.root, "volumes") }

// lockVolumes serializes changes to the volumes (create, remove, prune).
func (b *Backend) lockVolumes() (*flock.Flock, error) {
	if err := os.MkdirAll(b.volumesDir(), 0o700); err != nil {
		return nil, err
	}
	l := flock.New(filepath.Join(b.volumesDir(), ".lock"))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return l, nil
}

// CheckVolumeName refuses a name Docker would refuse.
func CheckVolumeName(name string) error {
	if !volumeName.MatchString(name) || len(name) > 255 {
		return fmt.Errorf("%w: %q includes invalid characters for a local volume name, only \"[a-zA-Z0-9][a-zA-Z0-9_.-]\" are allowed (at least two)", ErrVolumeName, name)
	}
	return nil
}

// CreateVolume makes the named volume, or returns it when it exists (as
// Docker's create does); an empty name makes an anonymous one. Its data
// directory belongs to root of the sandboxes' user namespace (as the
// workspace is handed over): container root can write it, rootless and
// as root.
func (b *Backend) CreateVolume(name string, labels map[string]string) (Volume, error) {
	anonymous := name == ""
	if anonymous {
		var r [32]byte
		rand.Read(r[:])
		name = hex.EncodeToString(r[:])
	}
	if err := CheckVolumeName(name); err != nil {
		return Volume{}, err
	}
	lock, err := b.lockVolumes()
	if err != nil {
		return Volume{}, err
	}
	defer lock.Unlock()
	if v, err := b.readVolume(name); err == nil {
		return v, nil
	}
	dir := filepath.Join(b.volumesDir(), name)
	// A directory without its volume.json is what a create that died
	// half-way left: made anew, so that the data directory chowned below
	// is the one just made, never what a sandbox put there.
	if err := b.removeVolumeData(dir); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	data := filepath.Join(dir, "_data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := b.chownToNamespaceRoot(data); err != nil {
		os.RemoveAll(dir)
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	v := Volume{Name: name, Driver: "local", Mountpoint: data, CreatedAt: time.Now().UTC().Truncate(time.Second),
		Labels: labels, Options: map[string]string{}, Anonymous: anonymous}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	meta, _ := json.Marshal(v)
	if err := os.WriteFile(filepath.Join(dir, volumeMeta), meta, 0o600); err != nil {
		os.RemoveAll(dir)
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	return v, nil
}

func (b *Backend) readVolume(name string) (Volume, error) {
	if CheckVolumeName(name) != nil {
		return Volume{}, fmt.Errorf("%w: %s", ErrVolumeNotFound, name)
	}
	meta, err := os.ReadFile(filepath.Join(b.volumesDir(), name, volumeMeta))
	if err != nil {
		return Volume{}, fmt.Errorf("%w: %s", ErrVolumeNotFound, name)
	}
	var v Volume
	if err := json.Unmarshal(meta, &v); err != nil {
		return Volume{}, fmt.Errorf("volume %s: %w", name, err)
	}
	v.Name, v.Mountpoint = name, filepath.Join(b.volumesDir(), name, "_data")
	return v, nil
}

// Volume returns the named volume, or ErrVolumeNotFound.
func (b *Backend) Volume(name string) (Volume, error) { return b.readVolume(name) }

// Volumes lists the volumes by name.
func (b *Backend) Volumes() ([]Volume, error) {
	ents, err := os.ReadDir(b.volumesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Volume
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if v, err := b.readVolume(e.Name()); err == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// VolumeUsers lists the ids of the sandboxes whose mounts use volume v.
func (b *Backend) VolumeUsers(v Volume) []string {
	recs, _, _ := b.state.list()
	var ids []string
	for _, rec := range recs {
		for _, m := range rec.Mounts {
			if m.Source == v.Mountpoint || strings.HasPrefix(m.Source, v.Mountpoint+"/") {
				ids = append(ids, rec.ID)
				break
			}
		}
	}
	return ids
}

// RemoveVolume removes the named volume and its data. A volume a sandbox
// uses is refused (ErrVolumeInUse), with force too, as Docker's; force
// only makes a missing volume no error.
func (b *Backend) RemoveVolume(name string, force bool) error {
	lock, err := b.lockVolumes()
	if err != nil {
		return err
	}
	defer lock.Unlock()
	v, err := b.readVolume(name)
	if err != nil {
		if force && errors.Is(err, ErrVolumeNotFound) {
			return nil
		}
		return err
	}
	return b.removeVolumeLocked(v)
}

func (b *Backend) removeVolumeLocked(v Volume) error {
	if users := b.VolumeUsers(v); len(users) > 0 {
		return fmt.Errorf("remove %s: %w - [%s]", v.Name, ErrVolumeInUse, strings.Join(users, ", "))
	}
	// Its data holds files of the sandboxes' ids: removed as the sandbox
	// directories are, first, so that a removal that fails half-way
	// leaves the volume there to remove again.
	dir := filepath.Join(b.volumesDir(), v.Name)
	if err := b.removeVolumeData(filepath.Join(dir, "_data")); err != nil {
		return fmt.Errorf("remove volume %s: %w", v.Name, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove volume %s: %w", v.Name, err)
	}
	return nil
}

// removeVolumeData deletes dir, a volume's data or a volume directory
// left half-made, which holds files of the sandboxes' ids: as root (or
// inside a user namespace) directly, rootless through the spawn server, as
// root of the user namespace. Not removeDir: what sandboxes write is never
// a path anything is unmounted at. os.RemoveAll works on descriptors and
// follows no symlink (TestVolumeRemoveRacingSymlink).
func (b *Backend) removeVolumeData(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if os.Geteuid() == 0 || userns.Inside() {
		return os.RemoveAll(dir)
	}
	bins, err := b.binaries()
	if err != nil {
		return err
	}
	req := &spawnd.Request{Op: spawnd.OpRemove, Dir: dir}
	_, err = b.spawnerFor(bins.server).call(context.Background(), b.store.Mapping(), req, nil, true)
	return err
}

// PruneVolumes removes the volumes no sandbox uses that keep selects
// (nil: all), and returns their names.
func (b *Backend) PruneVolumes(keep func(Volume) bool) ([]string, error) {
	lock, err := b.lockVolumes()
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	list, err := b.Volumes()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, v := range list {
		if keep != nil && keep(v) {
			continue
		}
		if len(b.VolumeUsers(v)) > 0 {
			continue
		}
		if err := b.removeVolumeLocked(v); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, v.Name)
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// VolumeOfMount names the volume whose data a mount source is, if any.
func (b *Backend) VolumeOfMount(source string) (string, bool) {
	rel, err := filepath.Rel(b.volumesDir(), source)
	if err != nil {
		return "", false
	}
	name, rest, _ := strings.Cut(rel, string(filepath.Separator))
	if rest != "_data" || CheckVolumeName(name) != nil {
		return "", false
	}
	return name, true
}

// volumeMounts turns the volume mounts of spec into bind mounts of their
// data directories, making the volumes that do not exist yet; each one
// used is then an allowed mount root (its own data directory, not the
// volumes' directory: a bind beside it must not reach another volume).
func (b *Backend) volumeMounts(spec *backend.SpawnSpec, plan *oci.MountPlan) error {
	mounts := slices.Clone(spec.Mounts)
	var used []string
	for i, m := range mounts {
		if m.Volume == "" && !m.AnonymousVolume {
			continue
		}
		v, err := b.CreateVolume(m.Volume, nil)
		if err != nil {
			return err
		}
		mounts[i].Source, mounts[i].Volume, mounts[i].AnonymousVolume, mounts[i].HandOver = v.Mountpoint, "", false, false
		used = append(used, v.Mountpoint)
	}
	spec.Mounts = mounts
	if len(used) > 0 && len(plan.AllowedRoots) > 0 {
		plan.AllowedRoots = append(slices.Clone(plan.AllowedRoots), used...)
	}
	return nil
}

// RemoveWithVolumes removes the sandbox and the anonymous volumes it
// used that no other sandbox uses (docker rm -v, run --rm).
func (s *Sandbox) RemoveWithVolumes() error {
	if err := s.Remove(); err != nil {
		return err
	}
	return s.b.dropAnonymousVolumes(s.rec)
}

// dropAnonymousVolumes removes the anonymous volumes rec's mounts name
// that no sandbox uses any more.
func (b *Backend) dropAnonymousVolumes(rec *record) error {
	var errs []error
	for _, m := range rec.Mounts {
		name, ok := b.VolumeOfMount(m.Source)
		if !ok {
			continue
		}
		if v, err := b.readVolume(name); err != nil || !v.Anonymous {
			continue
		}
		if err := b.RemoveVolume(name, true); err != nil && !errors.Is(err, ErrVolumeInUse) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
