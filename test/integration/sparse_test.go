package integration

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The sparse files of these tests: a hole of 4 GiB (1 GiB where more
// than one is made, or the store is small) and a line, made in a few blocks by `truncate -s`; a tar holds
// the hole as zeros.
const (
	big, bigSize     = "4G", 4<<30 + 5
	small, smallSize = "1G", 1<<30 + 5
	// What a copy of one may cost on disk: its last block and metadata.
	sparseMost = 16 << 20
)

// sparseCmd is the shell command that makes the sparse file p of size.
func sparseCmd(p, size string) string {
	return "truncate -s " + size + " " + p + " && echo tail >> " + p
}

// sizeAndTail is the shell command that prints the size of each of files
// and its last 5 bytes (tail -c seeks).
func sizeAndTail(files ...string) string {
	return "for f in " + strings.Join(files, " ") + "; do stat -c %s $f; tail -c 5 $f; done"
}

// blocks is the space the file p takes on disk (st_blocks).
func blocks(t *testing.T, p string) (size, used int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

// treeBlocks is the space everything below dir takes, that this process
// can see (a store's layers are rootless the subordinate ids').
func treeBlocks(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			if fi, err := d.Info(); err == nil {
				n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return n
}

// sparseHostFile makes a sparse file at p on the host, as the sandbox's.
func sparseHostFile(t *testing.T, p, size string) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", sparseCmd(p, size)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, used := blocks(t, p); used > sparseMost {
		t.Skipf("the test directory's filesystem does not keep holes (%d bytes used by a sparse file)", used)
	}
}

// endsInTail reports whether the file p ends in the line sparseCmd adds.
func endsInTail(t *testing.T, p string, size int64) bool {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 5)
	f.ReadAt(b, size-5)
	return string(b) == "tail\n"
}

// TestCopyKeepsHoles (issue 41, case 4): a 4 GiB sparse file a sandbox
// with --storage-opt size=16m made (a few blocks) is copied out by `cp
// box:/out HOST` (alone, and a 1 GiB one in a directory) as a sparse
// file, and a host's sparse file copied in fits the sandbox's 16 MiB. The
// tar between them holds the holes as zeros: the extraction (on the host;
// in the sandbox for cp in) leaves each 64 KiB-aligned run of zeros a
// hole and ftruncates to the size. It used to write the 4 GiB out on the
// host, and to fail copying in with "no space left on device".
func TestCopyKeepsHoles(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", "--storage-opt", "size=16m", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", sparseCmd("/out", big)+" && mkdir /d && echo small > /d/small && "+sparseCmd("/d/big", small))
	host := searchable(t, t.TempDir())
	e.must("cp", "box:/out", host+"/out")
	e.must("cp", "box:/d", host+"/d")
	for p, want := range map[string]int64{"out": bigSize, "d/big": smallSize} {
		size, used := blocks(t, filepath.Join(host, p))
		if size != want || used > sparseMost || !endsInTail(t, filepath.Join(host, p), want) {
			t.Errorf("cp box:/%s: %d bytes, %d of them on disk (ends in the line: %v); want %d, at most %d on disk", p, size, used, endsInTail(t, filepath.Join(host, p), size), want, sparseMost)
		}
	}
	if b, err := os.ReadFile(filepath.Join(host, "d", "small")); err != nil || string(b) != "small\n" {
		t.Errorf("cp box:/d: d/small %q %v", b, err)
	}

	// Into the sandbox: 1 GiB of zeros in a 16 MiB root filesystem.
	in := filepath.Join(host, "in")
	sparseHostFile(t, in, small)
	if out, code := e.run("", "cp", in, "box:/in"); code != 0 {
		t.Fatalf("cp of a sparse file into a sandbox with --storage-opt size=16m: exit %d: %s", code, out)
	}
	if out := e.must("exec", "box", "sh", "-c", sizeAndTail("/in")+"; du -k /in | cut -f1"); out != "1073741829\ntail\n4\n" && out != "1073741829\ntail\n8\n" {
		t.Errorf("in the sandbox, /in (size, end, KiB on disk): %q", out)
	}
}

// TestCommitKeepsHoles (issue 41, case 4): committing a sandbox that made
// a 1 GiB sparse file costs the store a few blocks: the layer's tar holds
// the zeros (gzip makes them a few MB), and the store extracts it with
// the holes kept; the image's file is the same. The store used to grow by
// 1 GiB. A sandbox whose root filesystem is on its --storage-opt size=
// tmpfs (which the host cannot see) is refused with that named; it used
// to fail with "image store helper failed".
func TestCommitKeepsHoles(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", sparseCmd("/out", small))
	before := treeBlocks(e.root)
	e.must("commit", "box", "committed")
	if grew := treeBlocks(e.root) - before; grew > 4*sparseMost {
		t.Errorf("commit of a 1 GiB sparse file: the store grew by %d bytes", grew)
	}
	if out := e.must("run", "--rm", "committed", "sh", "-c", sizeAndTail("/out")); out != "1073741829\ntail\n" {
		t.Errorf("the committed image's /out (size, end): %q", out)
	}
	e.must("run", "-d", "--name", "bounded", "--storage-opt", "size=16m", e.ref, "sleep", "infinity")
	if out, code := e.run("", "commit", "bounded", "nope"); code == 0 || !strings.Contains(out, "--storage-opt size=16MiB") {
		t.Errorf("commit of a sandbox with --storage-opt size=16m: exit %d: %s; want a refusal naming it", code, out)
	} else {
		t.Logf("commit of a sandbox with --storage-opt size=16m: %s", out)
	}
	e.run("", "rmi", "-f", "committed")
}

// TestBuildSparseFiles (issue 41, case 4): ADD of a 10 KB tar made by GNU
// tar --sparse (GNU and PAX formats) holding a 1 GiB sparse file, and a
// sparse file a RUN step made taken by COPY --from, build an image whose
// files are the same and cost the store a few blocks: the staged tars,
// the step's layer and the applied layers keep the holes. ADD used to
// refuse the GNU format ("a sparse file … is not unpacked") after
// writing the zeros to a temporary file, and every other step wrote them
// out in full.
func TestBuildSparseFiles(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	sparseHostFile(t, filepath.Join(dir, "big"), small)
	for _, format := range []string{"gnu", "pax"} {
		tar := exec.Command("tar", "--sparse", "--format="+format, "-cf", format+".tar", "big")
		tar.Dir = dir
		if out, err := tar.CombinedOutput(); err != nil {
			t.Fatalf("tar --sparse --format=%s: %v: %s", format, err, out)
		}
		if size, _ := blocks(t, filepath.Join(dir, format+".tar")); size > 64<<10 {
			t.Fatalf("%s.tar is %d bytes: not sparse", format, size)
		}
	}
	os.Remove(filepath.Join(dir, "big"))
	df := "FROM " + e.ref + " AS maker\nRUN " + sparseCmd("/made", small) + "\n" +
		"FROM " + e.ref + "\nADD gnu.tar /g/\nADD pax.tar /p/\nCOPY --from=maker /made /c/made\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeBlocks(e.root)
	if out, code := e.run("", "build", "-q", "-t", "sparse-built", dir); code != 0 {
		t.Fatalf("build: exit %d: %s", code, out)
	}
	if grew := treeBlocks(e.root) - before; grew > 8*sparseMost {
		t.Errorf("a build making four 1 GiB sparse files: the store grew by %d bytes", grew)
	}
	if out := e.must("run", "--rm", "sparse-built", "sh", "-c", sizeAndTail("/g/big", "/p/big", "/c/made")); out != strings.Repeat("1073741829\ntail\n", 3) {
		t.Errorf("the built image's files (size, end): %q", out)
	}
	e.run("", "rmi", "-f", "sparse-built")
	e.run("", "image", "prune", "-a", "-f")
}

// TestApparentSizesBoundedByStoreSpace (issue 41, case 4; root: the store
// is on a tmpfs of 256 MiB, so that the code before the fix failed
// safely): where a sparse file's holes cannot be kept, in a layer's tar
// (commit, a build's ADD) or in the archive docker cp through serve hands
// the docker client (which writes them out as zeros), the apparent size
// is bounded by the store's free space: a 1 GiB sparse file is refused
// before its zeros are read or sent, with the bound named, and nothing is
// left in the store or at the copy's destination. Commit and build used
// to write the zeros until the disk was full ("no space left on device"),
// and the docker client wrote 1 GiB.
func TestApparentSizesBoundedByStoreSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		// scripts/test.sh leaves this test out of the rootless run.
		t.Fatal("this test needs root: it mounts a size-limited tmpfs as the store")
	}
	mnt := searchable(t, t.TempDir())
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=256m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	e := newEnv(t)
	e.root = filepath.Join(mnt, "root") // newEnv's cleanup empties it
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	images := e.must("images", "-q")
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", sparseCmd("/out", small)+" && echo small > /small")
	bound := "free on the filesystem of " + e.root
	if out, code := e.run("", "commit", "box", "nope"); code == 0 || !strings.Contains(out, "/out (1073741829 bytes)") || !strings.Contains(out, bound) {
		t.Errorf("commit of a 1 GiB sparse file, the store on 256 MiB: exit %d: %s; want a refusal naming the store's free space", code, out)
	} else {
		t.Logf("commit: %s", out)
	}

	for name, bin := range dockerClients(t) {
		dest := searchable(t, t.TempDir())
		out, code := dockerCLI(t, bin, sock, "", "cp", "box:/out", dest+"/out")
		if code == 0 || !strings.Contains(out, "out (1073741829 bytes)") || !strings.Contains(out, bound) {
			t.Errorf("%s cp box:/out through serve: exit %d: %s; want a refusal naming the store's free space", name, code, out)
		} else {
			t.Logf("%s cp box:/out: %s", name, out)
		}
		if n := treeBlocks(dest); n > sparseMost {
			t.Errorf("%s cp box:/out: %d bytes written", name, n)
		}
		if out, code := dockerCLI(t, bin, sock, "", "cp", "box:/small", dest+"/small"); code != 0 {
			t.Errorf("%s cp box:/small: exit %d: %s", name, code, out)
		}
	}

	dir := searchable(t, t.TempDir())
	sparseHostFile(t, filepath.Join(dir, "big"), small)
	tar := exec.Command("tar", "--sparse", "-cf", "big.tar", "big")
	tar.Dir = dir
	if out, err := tar.CombinedOutput(); err != nil {
		t.Fatalf("tar --sparse: %v: %s", err, out)
	}
	os.Remove(filepath.Join(dir, "big"))
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+e.ref+"\nADD big.tar /\n"), 0o644)
	if out, code := e.run("", "build", "-q", "-t", "nope", dir); code == 0 || !strings.Contains(out, "/big (1073741829 bytes)") || !strings.Contains(out, bound) {
		t.Errorf("build ADD of a 1 GiB sparse file, the store on 256 MiB: exit %d: %s; want a refusal naming the store's free space", code, out)
	} else {
		t.Logf("build: %s", out)
	}
	if after := e.must("images", "-q"); after != images {
		t.Errorf("images after the refusals: %q, before %q", after, images)
	}
	if ents, err := os.ReadDir(filepath.Join(e.root, "tmp")); err != nil || len(ents) > 0 {
		t.Errorf("left in the store's staging directory: %v %v", ents, err)
	}
}
