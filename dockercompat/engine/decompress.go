package engine

import (
	"bufio"
	"compress/bzip2"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// decompressStream is Docker's archive.DecompressStream: a tar stream
// that may be gzip, zstd, bzip2 or xz compressed, told by its magic
// bytes (PUT /containers/{id}/archive takes any of them: testcontainers
// sends gzip). done releases the decompressor.
func decompressStream(r io.Reader) (out io.Reader, done func(), err error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(6)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case len(magic) >= 4 && string(magic[:4]) == "\x28\xb5\x2f\xfd":
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	case len(magic) >= 3 && string(magic[:3]) == "BZh":
		return bzip2.NewReader(br), func() {}, nil
	case len(magic) >= 6 && string(magic) == "\xfd7zXZ\x00":
		zr, err := xz.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("xz: %w", err)
		}
		return zr, func() {}, nil
	}
	return br, func() {}, nil
}
