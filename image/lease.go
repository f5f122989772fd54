package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/userns"
)

// ErrInUse is wrapped when an image cannot be removed because sandboxes
// use its layers.
var ErrInUse = errdefs.ErrConflict.WithMessage("image is in use")

// A lease keeps extracted layers in the store while something (a sandbox)
// uses them, as containerd's leases keep content: GC never removes a
// leased layer, and Remove refuses an image whose layers are leased unless
// forced. Leases are files under <root>/leases/, one per holder.
type lease struct {
	Holder string   `json:"holder"` // what to show: a sandbox's name
	Layers []string `json:"layers"` // diffID hex digests
}

func (s *Store) leasePath(id string) string { return s.path("leases", id) }

// Lease records that holder id (shown as name) uses the extracted layer
// directories dirs (as Image.Layers or LayersFor give them).
func (s *Store) Lease(id, name string, dirs []string) error {
	l := lease{Holder: name}
	for _, d := range dirs {
		l.Layers = append(l.Layers, filepath.Base(d))
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	// Private: a lease names its sandbox, and as root the store's root
	// lets every user through (0711) to the sandboxes' servers' files.
	// As root they belong to the store's own ids: GC runs in its helper
	// (root of a user namespace, an unprivileged host id), which must read
	// every lease.
	if err := os.MkdirAll(s.path("leases"), 0o700); err != nil {
		return err
	}
	uid, gid := s.helperIDs()
	if uid >= 0 {
		if err := os.Lchown(s.path("leases"), uid, gid); err != nil {
			return err
		}
	}
	return atomicfile.WriteVolatileOwned(s.leasePath(id), bytes.NewReader(b), 0o600, uid, gid)
}

// helperIDs are the host ids the store's helper runs as when they differ
// from the caller's (root), or -1, -1.
func (s *Store) helperIDs() (int, int) {
	if os.Geteuid() != 0 || userns.Inside() || len(s.mapping.UIDs) == 0 || len(s.mapping.GIDs) == 0 {
		return -1, -1
	}
	return int(s.mapping.UIDs[0].HostID), int(s.mapping.GIDs[0].HostID)
}

// Release drops holder id's lease; a missing one is not an error.
func (s *Store) Release(id string) error {
	if err := os.Remove(s.leasePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// leases returns every lease by holder id. A lease that cannot be read is
// an error: GC must not take it for absent and remove layers in use.
func (s *Store) leases() (map[string]lease, error) {
	out := map[string]lease{}
	ents, err := os.ReadDir(s.path("leases"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read the layers' leases: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(s.leasePath(e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read the layers' lease %s: %w", e.Name(), err)
		}
		var l lease
		if json.Unmarshal(b, &l) == nil {
			out[e.Name()] = l
		}
	}
	return out, nil
}

// leasedLayers is the set of diffIDs some lease holds.
func (s *Store) leasedLayers() (map[string]bool, error) {
	ls, err := s.leases()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range ls {
		for _, d := range l.Layers {
			out[d] = true
		}
	}
	return out, nil
}

// holdersOf names the holders of leases on any of diffIDs.
func (s *Store) holdersOf(diffIDs []string) ([]string, error) {
	ls, err := s.leases()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		if slices.ContainsFunc(l.Layers, func(d string) bool { return slices.Contains(diffIDs, d) }) {
			out = append(out, l.Holder)
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// inUse refuses to remove the image of descriptor digest dgst while
// sandboxes hold its layers, but for those in kept (layers of the images
// that stay).
func (s *Store) inUse(ref, dgst string, kept map[string]bool) error {
	_, cfg, err := s.manifest(dgst)
	if err != nil {
		return nil // nothing to protect: GC decides
	}
	var diffs []string
	for _, d := range cfg.RootFS.DiffIDs {
		if !kept[d.Hex] {
			diffs = append(diffs, d.Hex)
		}
	}
	holders, err := s.holdersOf(diffs)
	if err != nil {
		return err
	}
	if len(holders) > 0 {
		return fmt.Errorf("%w: %s is used by sandbox %s (remove them first, or rmi -f: the name goes, the layers stay until they are removed)",
			ErrInUse, ref, strings.Join(holders, ", "))
	}
	return nil
}
