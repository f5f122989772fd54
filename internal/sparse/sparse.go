// Package sparse keeps the holes of the files slopbox writes from a tar
// stream, and bounds what it hands on in full. A tar stream carries a
// sparse file's holes as zeros (Go's archive/tar reads GNU and PAX sparse
// entries that way, and cannot write them): a file a sandbox made with
// `truncate -s 4G` costs a few blocks where it was made and 4 GiB wherever
// its zeros are written out. Writer leaves every 64 KiB-aligned run of
// zeros it is given as a hole; where the zeros cannot be kept (a layer
// tar, an archive for another program), Bound caps the apparent size.
package sparse

import (
	"bytes"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/docker/go-units"
	"golang.org/x/sys/unix"
)

// Chunk is the unit Writer checks for zeros: a piece of a write that lies
// in one Chunk-aligned stretch of the file and is all zeros is skipped.
const Chunk = 64 << 10

var zeros [Chunk]byte

// File is what Writer writes to: an *os.File, or a raw descriptor's
// wrapper.
type File interface {
	io.WriterAt
	Truncate(size int64) error
}

// Writer writes a stream to an empty file from offset 0, leaving its
// zeros unwritten: every piece of a Write that fills (part of) one
// Chunk-aligned stretch with zeros only is skipped, so whole stretches of
// zeros become holes; the file reads back as the stream. Close gives the
// file its full size (a stream ending in zeros leaves them as a hole too).
// The check costs one comparison per Chunk, which ends at the first byte
// that is not zero: ordinary data is written as it comes.
type Writer struct {
	f   File
	off int64 // the stream's length so far
	end int64 // the end of the last bytes written
}

// NewWriter writes to f, which must be empty.
func NewWriter(f File) *Writer { return &Writer{f: f} }

func (w *Writer) Write(p []byte) (int, error) {
	start := 0 // where the bytes yet to write begin, in p
	for i := 0; i < len(p); {
		n := min(Chunk-int((w.off+int64(i))%Chunk), len(p)-i)
		if bytes.Equal(p[i:i+n], zeros[:n]) {
			if err := w.writeAt(p[start:i], w.off+int64(start)); err != nil {
				return start, err
			}
			start = i + n
		}
		i += n
	}
	if err := w.writeAt(p[start:], w.off+int64(start)); err != nil {
		return start, err
	}
	w.off += int64(len(p))
	return len(p), nil
}

func (w *Writer) writeAt(b []byte, at int64) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := w.f.WriteAt(b, at); err != nil {
		return err
	}
	w.end = at + int64(len(b))
	return nil
}

// Close sets the file's size to the stream's length; it does not close
// the file.
func (w *Writer) Close() error {
	if w.end < w.off {
		return w.f.Truncate(w.off)
	}
	return nil
}

// Size is the length of the stream written so far (the file's apparent
// size once Close has run).
func (w *Writer) Size() int64 { return w.off }

// ErrTooLarge is wrapped when what would be written exceeds a Bound.
var ErrTooLarge = errdefs.ErrInvalidArgument.WithMessage("too large")

// Bound is the most a copy or a layer may hold when its files' holes
// cannot be kept, counted in apparent size (sparse files in full).
type Bound struct {
	Bytes int64
	// What names the bound for the refusal: the flag the user gave
	// ("--storage-opt size=16m"), or "the 3.2GB free on the filesystem
	// of DIR".
	What string
}

// Unbounded is no bound.
var Unbounded = Bound{Bytes: 1<<63 - 1}

// FreeSpace bounds what is written below dir by the space free there for
// the caller (statfs's f_bavail): what cannot fit fails at once, with the
// bound named, rather than after filling the disk. A filesystem that
// cannot be asked gives no bound.
func FreeSpace(dir string) Bound {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Unbounded
	}
	n := int64(st.Bavail) * st.Bsize
	return Bound{Bytes: n, What: fmt.Sprintf("the %s free on the filesystem of %s", units.HumanSize(float64(n)), dir)}
}

// Counter adds up apparent sizes against a Bound.
type Counter struct {
	Bound Bound
	total int64
}

// Add counts size bytes of name; past the bound it returns an error that
// names both, wrapping ErrTooLarge.
func (c *Counter) Add(name string, size int64) error {
	if size > c.Bound.Bytes-c.total {
		return fmt.Errorf("%w: %s (%d bytes) brings it to %s, more than %s (sizes are apparent: a sparse file counts in full, its holes as zeros)",
			ErrTooLarge, name, size, units.HumanSize(float64(c.total)+float64(size)), c.Bound.What)
	}
	c.total += size
	return nil
}

// Total is what was counted.
func (c *Counter) Total() int64 { return c.total }
