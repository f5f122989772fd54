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

	"github.com/slopbox/slopbox/internal/atomicfile"
)

// ErrInUse is wrapped when an image cannot be removed because sandboxes
// use its layers.
var ErrInUse = errors.New("image is in use")

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
	if err := os.MkdirAll(s.path("leases"), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteVolatile(s.leasePath(id), bytes.NewReader(b), 0o600)
}

// Release drops holder id's lease; a missing one is not an error.
func (s *Store) Release(id string) error {
	if err := os.Remove(s.leasePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// leases returns every lease by holder id.
func (s *Store) leases() map[string]lease {
	out := map[string]lease{}
	ents, _ := os.ReadDir(s.path("leases"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(s.leasePath(e.Name()))
		var l lease
		if err == nil && json.Unmarshal(b, &l) == nil {
			out[e.Name()] = l
		}
	}
	return out
}

// leasedLayers is the set of diffIDs some lease holds.
func (s *Store) leasedLayers() map[string]bool {
	out := map[string]bool{}
	for _, l := range s.leases() {
		for _, d := range l.Layers {
			out[d] = true
		}
	}
	return out
}

// holdersOf names the holders of leases on any of diffIDs.
func (s *Store) holdersOf(diffIDs []string) []string {
	var out []string
	for _, l := range s.leases() {
		if slices.ContainsFunc(l.Layers, func(d string) bool { return slices.Contains(diffIDs, d) }) {
			out = append(out, l.Holder)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
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
	if holders := s.holdersOf(diffs); len(holders) > 0 {
		return fmt.Errorf("%w: %s is used by sandbox %s (remove them first, or rmi -f: the name goes, the layers stay until they are removed)",
			ErrInUse, ref, strings.Join(holders, ", "))
	}
	return nil
}
