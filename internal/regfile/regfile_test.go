package regfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/test/fixtures"
)

// openBounded runs open, which must answer (with a file or an error)
// rather than wait for a writer to fifo: after fixtures.Patience the test
// fails, and a writer is opened so that the hung open returns.
func openBounded(t *testing.T, fifo string, open func() (*os.File, error)) (*os.File, error) {
	t.Helper()
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := open()
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-time.After(fixtures.Patience()):
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			defer unix.Close(fd)
		}
		<-done
		t.Fatalf("opening %s hung (no answer after %s)", fifo, fixtures.Patience())
		return nil, nil
	}
}

func TestOpenRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for name, open := range map[string]func() (*os.File, error){
		"Open":   func() (*os.File, error) { return Open(fifo) },
		"OpenIn": func() (*os.File, error) { return OpenIn(root, "fifo") },
	} {
		f, err := openBounded(t, fifo, open)
		if err == nil {
			f.Close()
			t.Fatalf("%s opened a FIFO", name)
		}
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("%s: %v, want ErrNotRegular naming a named pipe", name, err)
		}
	}
}

func TestOpenRegularFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("content"), 0o644)
	os.Symlink("f", filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fl, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); fl&unix.O_NONBLOCK != 0 {
		t.Error("O_NONBLOCK is still set")
	}
	if b, _ := io.ReadAll(f); string(b) != "content" {
		t.Errorf("read %q", b)
	}
	// A symlink is refused by Open, naming its target; followed inside a root.
	if _, err := Open(filepath.Join(dir, "link")); err == nil || !strings.Contains(err.Error(), "is a symlink") || !strings.Contains(err.Error(), p) {
		t.Errorf("Open of a symlink: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "d")); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("Open of a directory: %v", err)
	}
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	g, err := OpenIn(root, "link")
	if err != nil {
		t.Fatalf("OpenIn of a symlink inside the root: %v", err)
	}
	g.Close()
}
