package image

import (
	"bufio"
	"compress/bzip2"
	"fmt"
	"io"

	"github.com/ulikunitz/xz"
)

// DecompressStream is Docker's archive.DecompressStream: a tar stream
// that may be gzip, zstd, bzip2 or xz compressed, told by its magic
// bytes (PUT /containers/{id}/archive takes any of them: testcontainers
// sends gzip). close releases the decompressor.
func DecompressStream(r io.Reader) (out io.Reader, close func(), err error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(6)
	switch {
	case len(magic) >= 3 && string(magic[:3]) == "BZh":
		return bzip2.NewReader(br), func() {}, nil
	case len(magic) >= 6 && string(magic) == "\xfd7zXZ\x00":
		zr, err := xz.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("xz: %w", err)
		}
		return zr, func() {}, nil
	}
	return decompress(br)
}
