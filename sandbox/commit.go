package sandbox

import (
	"errors"
	"fmt"

	"github.com/docker/go-units"

	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// WithUpperDir calls f with the sandbox's upper directory (what it wrote
// to its root filesystem, in overlay form), for slopbox commit. A running
// sandbox is paused meanwhile (as docker commit does), unless noPause, so
// no process writes the tree as it is read; it reads through an os.Root
// (archive.WriteLayer), never by name. Rootless, a sandbox whose user has
// a nested id mapping is refused: its files' owners are not the image's.
func (s *Sandbox) WithUpperDir(noPause bool, f func(upper string) error) (err error) {
	if s.rec.Limits.RootfsBytes > 0 {
		return fmt.Errorf("%s was started with --storage-opt size=%s: its writable layer is a size-limited tmpfs that only the sandbox sees (and that goes at stop), which the host cannot read: start it without --storage-opt size to commit it", cmpName(s.rec), units.BytesSize(float64(s.rec.Limits.RootfsBytes)))
	}
	if s.rec.MapKey != "" {
		return fmt.Errorf("commit %s: its user %d has an id mapping of its own (rootless, not root): slopbox cannot commit it; run it as root (--user 0) to commit", cmpName(s.rec), s.rec.User.UID)
	}
	if s.staleLayer() {
		return fmt.Errorf("commit %s: %w", cmpName(s.rec), spawnd.ErrStaleVolatile)
	}
	if !noPause && s.rec.running() && !s.rec.Paused {
		if err := s.Pause(); err != nil {
			if s.rec.running() {
				return err
			}
			// Its main command ended between the check and the pause
			// (docker-py commits a `touch` the moment it exits): nothing
			// runs to write to the layer, which is committed as it is.
			return f(s.UpperDir())
		}
		defer func() {
			if uerr := s.Unpause(); uerr != nil && !errors.Is(uerr, ErrNotPaused) {
				err = errors.Join(err, uerr)
			}
		}()
	}
	return f(s.UpperDir())
}

// staleLayer reports whether the sandbox's writable layer may be
// incomplete: mounted without syncs (Disposable) before the host
// restarted (spawnd.StaleVolatile).
func (s *Sandbox) staleLayer() bool {
	return spawnd.StaleVolatile(s.dir, s.rec.Disposable && s.rec.Limits.RootfsBytes == 0)
}

// ImageID is the id of the image the sandbox was made from.
func (s *Sandbox) ImageID() string { return s.rec.ImageID }
