package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/test/fixtures"
)

// Hold: a build's writes (CommitDir, CommitTar with its tar passed over
// the session's socket, PutCacheMarks) go to one helper process, which is
// gone once released; writes after that start helpers of their own.
func TestHoldServesBuildWritesInOneHelper(t *testing.T) {
	if userns.Inside() {
		t.Skip("inside the store's namespace no helper runs")
	}
	s := openTestStore(t)
	ctx := context.Background()
	release := s.Hold()
	t.Cleanup(release)
	pid := func() int {
		s.sess.mu.Lock()
		defer s.sess.mu.Unlock()
		if s.sess.cur == nil {
			return 0
		}
		return s.sess.cur.pid
	}

	dir := filepath.Join(testDir(t), "upper")
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "made"), []byte("by a step\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key1, key2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	nl1, err := s.CommitDir(ctx, dir, key1)
	if err != nil {
		t.Fatal(err)
	}
	first := pid()
	if first == 0 {
		t.Fatal("no helper session after a CommitDir while held")
	}
	if b, err := os.ReadFile(filepath.Join(s.LayerDir(nl1.DiffID), "etc", "made")); err != nil || string(b) != "by a step\n" {
		t.Errorf("committed layer: %q, %v", b, err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "copied", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("cp\n"))
	tw.Close()
	f, err := os.CreateTemp(testDir(t), "tar")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	f.Seek(0, 0)
	nl2, err := s.CommitTar(ctx, []v1.Hash{nl1.DiffID}, f, key2)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(s.LayerDir(nl2.DiffID), "copied")); err != nil || string(b) != "cp\n" {
		t.Errorf("copied layer: %q, %v", b, err)
	}
	if err := s.PutCacheMarks(ctx, key1, nl2, []string{key1, key2}); err != nil {
		t.Fatal(err)
	}
	// Writes at once (concurrent builds in serve): one goes to the
	// session, the others to helpers of their own.
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := s.CommitDir(ctx, dir, "")
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent CommitDir: %v", err)
		}
	}
	if got := pid(); got != first {
		t.Errorf("helper pid %d after more writes, want the session's %d", got, first)
	}
	for _, k := range []string{key1, key2} {
		if _, ok := s.CachedLayer(k); !ok {
			t.Errorf("cache entry %s missing", k[:4])
		}
	}
	if m := s.CacheMarks(key1); !m[key1] || !m[key2] {
		t.Errorf("cache marks %v", m)
	}

	release()
	fixtures.Eventually(t, "the session's helper gone after release", func() (bool, string) {
		return syscall.Kill(first, 0) != nil || zombie(first), fmt.Sprintf("pid %d still runs", first)
	})
	if _, err := s.CommitDir(ctx, dir, key1); err != nil {
		t.Fatalf("CommitDir after release: %v", err)
	}
	if got := pid(); got != 0 {
		t.Errorf("a session (pid %d) after release", got)
	}
	assertConsistent(t, s)
}

// A cancelled context stops the session's work, as it stops a helper of
// its own, and the next write starts a new session.
func TestHoldCancelledWrite(t *testing.T) {
	if userns.Inside() {
		t.Skip("inside the store's namespace no helper runs")
	}
	s := openTestStore(t)
	release := s.Hold()
	defer release()
	dir := filepath.Join(testDir(t), "upper")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.CommitDir(ctx, dir, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("CommitDir with a cancelled context: %v", err)
	}
	if _, err := s.CommitDir(context.Background(), dir, ""); err != nil {
		t.Fatalf("CommitDir after a cancelled one: %v", err)
	}
	release()
	assertConsistent(t, s)
}

func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}
