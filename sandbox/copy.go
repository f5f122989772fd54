package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// CopyOut writes src, a path in the sandbox, to w as a tar stream (docker
// cp SANDBOX:SRC). The stream is made inside the sandbox, by its root, so
// its symlinks resolve in the sandbox and are stored, never followed.
func (s *Sandbox) CopyOut(ctx context.Context, src string, w io.Writer) error {
	return s.copyHelper(ctx, []string{"out", src}, nil, w)
}

// CopyIn extracts the tar stream r at dest in the sandbox (docker cp
// SRC SANDBOX:DEST); contents says the stream holds a directory's entries.
// Files land owned by the sandbox's root, without setuid or setgid bits,
// and never outside dest.
func (s *Sandbox) CopyIn(ctx context.Context, r io.Reader, dest string, contents bool) error {
	mode := "item"
	if contents {
		mode = "contents"
	}
	return s.copyHelper(ctx, []string{"in", dest, mode}, r, io.Discard)
}

// CopyBound is the most a copy out of the sandbox may hold, in apparent
// size, where its files' holes cannot be kept (a tar another program
// extracts, writing a sparse file's holes out as zeros): the space free
// in the store, which a copy landing on this host could not exceed
// anyway. Not its --storage-opt size=, which bounds only its writable
// layer: its image's files and its mounts may be larger.
func (s *Sandbox) CopyBound() sparse.Bound { return sparse.FreeSpace(s.b.store.Root()) }

func (s *Sandbox) copyHelper(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	if !s.rec.running() {
		return fmt.Errorf("sandbox %s is not running: start it to copy files (`slopbox start %s`)", cmpName(s.rec), cmpName(s.rec))
	}
	req := backend.ExecRequest{
		Argv: append([]string{agentPath}, args...),
		Env:  map[string]string{"_SLOPBOX_REEXEC": spawnd.CopyHelper},
		User: "0:0", Cwd: "/",
	}
	var files [3]*os.File // stdin, stdout, stderr for the helper
	var ours []*os.File
	defer func() {
		for _, f := range append(files[:], ours...) {
			if f != nil {
				f.Close()
			}
		}
	}()
	copies := make(chan error, 3)
	pending := 0
	var outErr error // a failure to take what the helper writes
	if in != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		files[0], ours = r, append(ours, w)
		pending++
		go func() {
			_, err := io.Copy(w, in)
			w.Close()
			copies <- err
		}()
	} else {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return err
		}
		files[0] = f
	}
	var stderr bytes.Buffer
	for i, dst := range []io.Writer{out, &stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		files[1+i], ours = w, append(ours, r)
		pending++
		go func() {
			_, err := io.Copy(dst, r)
			if err != nil {
				// The helper would block writing to a pipe nobody
				// reads, and Attach never return: closing it ends
				// the helper (EPIPE), and err is what is reported.
				r.Close()
				err = outError{err}
			}
			copies <- err
		}()
	}
	code, err := s.Attach(ctx, req, files[0], files[1], files[2], false)
	for i := range files {
		files[i].Close()
		files[i] = nil
	}
	var copyErr error
	for range pending {
		e := <-copies
		if oe, ok := e.(outError); ok && outErr == nil {
			outErr, e = oe.error, nil
		}
		if e != nil && copyErr == nil {
			copyErr = e
		}
	}
	switch {
	case err != nil:
		return err
	case outErr != nil:
		// The helper's own failure, if any, follows from this one.
		return outErr
	case code != 0:
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", code)
		}
		return fmt.Errorf("in sandbox %s: %s", cmpName(s.rec), msg)
	}
	return copyErr
}

// outError marks a failure to take the helper's output.
type outError struct{ error }
