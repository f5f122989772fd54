package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"github.com/slopbox/slopbox/image/archive/archivetest"
	"github.com/slopbox/slopbox/internal/reexec"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slopbox/slopbox/internal/userns"
)

type ocispecIndex = ocispec.Index

// flattenInNS runs Flatten inside the store's user namespace, where the
// layers' subordinate owners are visible as themselves (rootless, a 0700
// directory of uid 1000 is unreadable from the host user).
func flattenInNS(t *testing.T, s *Store, dst string, layers []string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Chown(filepath.Dir(dst), int(s.mapping.UIDs[0].HostID), int(s.mapping.GIDs[0].HostID))
	}
	cmd := userns.Command(nil)
	cmd.Env = append(cmd.Env, reexec.Env+"=test-flatten", "FLATTEN_DST="+dst, "FLATTEN_LAYERS="+strings.Join(layers, ":"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := userns.Start(cmd, s.mapping); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flatten in namespace: %v: %s", err, out.String())
	}
	t.Cleanup(func() {
		cmd := userns.Command(nil)
		cmd.Env = append(cmd.Env, reexec.Env+"=test-rm", "RM_PATH="+dst)
		if err := userns.Start(cmd, s.mapping); err == nil {
			cmd.Wait()
		}
	})
}

func init() {
	reexec.Register("test-flatten", func() int {
		if err := archivetest.Flatten(os.Getenv("FLATTEN_DST"), strings.Split(os.Getenv("FLATTEN_LAYERS"), ":")); err != nil {
			fmt.Println(err)
			return 1
		}
		return 0
	})
	reexec.Register("test-rm", func() int {
		if err := os.RemoveAll(os.Getenv("RM_PATH")); err != nil {
			fmt.Println(err)
			return 1
		}
		return 0
	})
}

func toHostUID(s *Store, id uint32) (uint32, bool) { return userns.ToHost(s.mapping.UIDs, id) }

func statUID(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }

func mustRef(t *testing.T, s *Store, ref string) name.Reference {
	r, err := s.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tarDir writes dir's files as a plain tar at out.
func tarDir(t *testing.T, dir, out string) {
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	defer tw.Close()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			src, _ := os.Open(p)
			defer src.Close()
			_, err = io.Copy(tw, src)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testDir is a t.TempDir that the user namespace's root may traverse.
func testDir(t *testing.T) string {
	d := t.TempDir()
	for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
