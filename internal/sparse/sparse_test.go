package sparse

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWriterKeepsContents: streams of zeros and data, cut into writes at
// random points (across chunk boundaries, a byte at a time), read back as
// written, with the file's size the stream's.
func TestWriterKeepsContents(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for i := range 200 {
		var stream []byte
		for range r.IntN(12) {
			n := r.IntN(3 * Chunk)
			if r.IntN(3) == 0 {
				n = Chunk * (1 + r.IntN(3))
			}
			b := make([]byte, n)
			switch r.IntN(3) {
			case 0: // zeros
			case 1:
				for j := range b {
					b[j] = byte(r.UintN(256))
				}
			case 2: // zeros with a byte set here and there
				for range 1 + r.IntN(4) {
					if n > 0 {
						b[r.IntN(n)] = 1
					}
				}
			}
			stream = append(stream, b...)
		}
		f, err := os.Create(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		w := NewWriter(f)
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(2*Chunk))
			if r.IntN(10) == 0 {
				n = 1
			}
			if m, err := w.Write(rest[:n]); err != nil || m != n {
				t.Fatalf("write: %d, %v", m, err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, stream) || w.Size() != int64(len(stream)) {
			t.Fatalf("stream %d: read back %d bytes, wrote %d (Size %d), equal %v", i, len(got), len(stream), w.Size(), bytes.Equal(got, stream))
		}
		os.Remove(f.Name())
	}
}

// TestWriterLeavesHoles: 1 GiB of zeros around a few bytes, written in
// 32 KiB pieces (a pipe's), costs a few blocks.
func TestWriterLeavesHoles(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewWriter(f)
	piece := make([]byte, 32<<10)
	const size = 1 << 30
	for off := 0; off < size; off += len(piece) {
		if off == size/2 {
			copy(piece, "middle")
		}
		w.Write(piece)
		clear(piece)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512
	if fi.Size() != size || blocks > 1<<20 {
		t.Fatalf("1 GiB of zeros with 6 bytes: size %d, %d bytes of blocks", fi.Size(), blocks)
	}
	b := make([]byte, 6)
	if _, err := f.ReadAt(b, size/2); err != nil || string(b) != "middle" {
		t.Fatalf("the data: %q %v", b, err)
	}
}

func TestCounterNamesItsBound(t *testing.T) {
	c := Counter{Bound: Bound{Bytes: 16 << 20, What: "its --storage-opt size=16MiB"}}
	if err := c.Add("a", 8<<20); err != nil {
		t.Fatal(err)
	}
	err := c.Add("out", 4<<30)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "out (4294967296 bytes)") || !strings.Contains(err.Error(), "its --storage-opt size=16MiB") {
		t.Fatalf("over the bound: %v", err)
	}
	if err := c.Add("b", 8<<20); err != nil || c.Total() != 16<<20 {
		t.Fatalf("up to the bound: %v, total %d", err, c.Total())
	}
	if b := FreeSpace(t.TempDir()); b.Bytes <= 0 || !strings.Contains(b.What, "free on the filesystem of") {
		t.Fatalf("FreeSpace: %+v", b)
	}
}

type discardAt struct{}

func (discardAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (discardAt) Truncate(int64) error                   { return nil }

// BenchmarkWriterData is the Writer's own cost on data that is not zeros
// (its file discards): one comparison per 64 KiB, which ends at once.
func BenchmarkWriterData(b *testing.B) {
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	b.SetBytes(int64(len(p)))
	w := NewWriter(discardAt{})
	for b.Loop() {
		w.Write(p)
	}
}

// BenchmarkWriterZeros is its cost on zeros, each compared in full.
func BenchmarkWriterZeros(b *testing.B) {
	p := make([]byte, 1<<20)
	b.SetBytes(int64(len(p)))
	w := NewWriter(discardAt{})
	for b.Loop() {
		w.Write(p)
	}
}
