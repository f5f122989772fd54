package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestCopyInRacingSymlink: `cp HOSTDIR box:DEST` while the directory's
// files are swapped with symlinks to a secret host file (renameat2
// RENAME_EXCHANGE, as a sandbox sharing the directory can): the secret
// never reaches the sandbox. The host side used to lstat a name and then
// open it by name; it lost in about one copy in three.
func TestCopyInRacingSymlink(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	const secretText = "SECRET-HOST-KEY!"
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(searchable(t, t.TempDir()), "tree")
	os.Mkdir(tree, 0o755)
	var stops []func()
	for i := range 3 {
		// Same size as the secret: a followed symlink gives a well-formed entry.
		os.WriteFile(filepath.Join(tree, fmt.Sprintf("f%d", i)), []byte(strings.Repeat("x", len(secretText))), 0o644)
		os.Symlink(secret, filepath.Join(tree, fmt.Sprintf("s%d", i)))
		stops = append(stops, fixtures.FlipNames(t, tree, fmt.Sprintf("f%d", i), fmt.Sprintf("s%d", i)))
	}
	tries := 0
	for deadline := time.Now().Add(8 * time.Second); tries < 40 && time.Now().Before(deadline); tries++ {
		// A copy may fail (a name changed under it); it must not leak.
		e.run("", "cp", tree, fmt.Sprintf("box:/tmp/c%d", tries))
	}
	for _, stop := range stops {
		stop()
	}
	out, _ := e.run("", "exec", "box", "sh", "-c", "find /tmp -type f | xargs grep -l "+secretText+"; true")
	if leaked := strings.Fields(out); len(leaked) > 0 {
		t.Fatalf("the secret reached the sandbox in %d of %d copies: %v", len(leaked), tries, leaked)
	}
	if out := e.must("exec", "box", "sh", "-c", "ls /tmp | wc -l"); strings.TrimSpace(out) == "0" {
		t.Fatalf("no copy arrived in %d tries", tries)
	}
	t.Logf("%d copies, none carried the secret", tries)
}

// TestServeCopyDirContents: `docker cp box:DIR/. NEW` through serve
// creates NEW with DIR's contents and puts nothing beside it, as with
// dockerd: the archive of DIR/. starts with DIR itself (./) and the stat
// header is DIR's. The archive used to start with DIR's first entry, and
// the client extracted the entries into NEW's parent. Each docker client
// installed (docker 28, Debian's 20.10) is run.
func TestServeCopyDirContents(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /tmp/d/sub && echo a > /tmp/d/a && echo b > /tmp/d/sub/b && echo h > /tmp/d/.hidden && chmod 750 /tmp/d")

	resp, err := engineClient(sock).Head("http://docker/containers/box/archive?path=/tmp/d/.")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	raw, _ := base64.StdEncoding.DecodeString(resp.Header.Get("X-Docker-Container-Path-Stat"))
	var stat struct {
		Name string
		Mode fs.FileMode
	}
	if err := json.Unmarshal(raw, &stat); err != nil || stat.Mode != fs.ModeDir|0o750 {
		t.Errorf("HEAD archive of /tmp/d/.: %d, stat %s (%+v, %v): want the directory's own", resp.StatusCode, raw, stat, err)
	}

	for _, bin := range dockerClients(t) {
		parent := searchable(t, t.TempDir())
		dest := filepath.Join(parent, "new")
		if out, code := dockerCLI(t, bin, sock, "", "cp", "box:/tmp/d/.", dest); code != 0 {
			t.Fatalf("%s cp box:/tmp/d/. %s: exit %d: %s", bin, dest, code, out)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 1 || ents[0].Name() != "new" {
			t.Errorf("%s: beside the destination: %v, want only new", bin, ents)
		}
		for f, want := range map[string]string{"a": "a\n", "sub/b": "b\n", ".hidden": "h\n"} {
			if b, err := os.ReadFile(filepath.Join(dest, f)); err != nil || string(b) != want {
				t.Errorf("%s: new/%s: %q %v", bin, f, b, err)
			}
		}
		// Into an existing directory: the contents land in it.
		os.Remove(filepath.Join(dest, "a"))
		if out, code := dockerCLI(t, bin, sock, "", "cp", "box:/tmp/d/.", dest); code != 0 {
			t.Fatalf("%s cp into an existing directory: exit %d: %s", bin, code, out)
		}
		if _, err := os.Stat(filepath.Join(dest, "a")); err != nil {
			t.Errorf("%s: into an existing directory: %v", bin, err)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Errorf("%s: beside the existing destination: %v", bin, ents)
		}
	}
}

// TestCopyIntoExistingKeepsTypes: `cp box:DIR/. EXISTING` (and into a
// sandbox) refuses, as docker cp, to replace a directory with a file: exit
// 1, nothing removed. It used to delete the directory. (A file may become
// a symlink, as with docker cp: TestCopyReplaceRulesAsDocker.)
func TestCopyIntoExistingKeepsTypes(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /tmp/a /tmp/b && echo x > /tmp/a/x && ln -s /etc/shadow /tmp/b/y")
	host := searchable(t, t.TempDir())
	os.MkdirAll(filepath.Join(host, "x"), 0o755)
	os.WriteFile(filepath.Join(host, "x", "keep"), []byte("kept"), 0o644)
	os.WriteFile(filepath.Join(host, "y"), []byte("file"), 0o644)
	if out, code := e.run("", "cp", "box:/tmp/a/.", host); code != 1 || !strings.Contains(out, "cannot overwrite") {
		t.Errorf("cp box:/tmp/a/. %s: exit %d: %s", host, code, out)
	}
	if b, err := os.ReadFile(filepath.Join(host, "x", "keep")); err != nil || string(b) != "kept" {
		t.Errorf("the directory in the destination: %q %v", b, err)
	}
	// Into the sandbox: its directory /tmp/a/x/ is not replaced by the host's file x.
	e.must("exec", "box", "sh", "-c", "rm /tmp/a/x && mkdir /tmp/a/x && echo kept > /tmp/a/x/keep")
	src := filepath.Join(searchable(t, t.TempDir()), "src")
	os.Mkdir(src, 0o755)
	os.WriteFile(filepath.Join(src, "x"), []byte("file"), 0o644)
	if out, code := e.run("", "cp", src+"/.", "box:/tmp/a"); code != 1 || !strings.Contains(out, "cannot overwrite") {
		t.Errorf("cp into the sandbox: exit %d: %s", code, out)
	}
	if out := e.must("exec", "box", "cat", "/tmp/a/x/keep"); out != "kept\n" {
		t.Errorf("the sandbox's directory: %q", out)
	}
}

// TestCopyOutThroughPlantedSymlink (attack B3, static): a sandbox whose
// workspace is on the host plants a symlink there; `cp box:SRC WS/link/...`
// must not write through it (root: into /tmp; rootless: into the user's
// ~/.ssh). DEST's parent is opened with no symlink followed, DEST itself
// never through one. It used to create the files where the link pointed.
func TestCopyOutThroughPlantedSymlink(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(searchable(t, t.TempDir()), "ws")
	os.Mkdir(ws, 0o755)
	victim := filepath.Join(searchable(t, t.TempDir()), "victim")
	os.MkdirAll(filepath.Join(victim, "target"), 0o755)
	e.must("run", "-d", "--name", "box", "--workspace", ws, e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /out && echo job > /out/job && ln -s "+victim+" /workspace/tmpl && mkdir /workspace/sub && ln -s "+victim+" /workspace/sub/d")
	for _, c := range [][2]string{
		{"box:/out", ws + "/tmpl/target/run1"},
		{"box:/out/.", ws + "/tmpl/target/run2"},
		{"box:/out", ws + "/tmpl/target"},
		{"box:/out/job", ws + "/sub/d/target/job"},
		{"box:/out/.", ws + "/tmpl"},
	} {
		if out, code := e.run("", "cp", c[0], c[1]); code == 0 {
			t.Errorf("cp %s %s: exit 0: %s", c[0], c[1], out)
		} else if !strings.Contains(out, "symlink") && !strings.Contains(out, "symbolic link") {
			t.Errorf("cp %s %s: %s, want a refusal naming the symlink", c[0], c[1], out)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(victim, "target")); len(ents) > 0 {
		t.Errorf("cp wrote through the planted symlink: %v", ents)
	}
	// The real path works.
	e.must("cp", "box:/out", ws+"/real")
	if b, err := os.ReadFile(filepath.Join(ws, "real", "job")); err != nil || string(b) != "job\n" {
		t.Errorf("cp to a real path: %q %v", b, err)
	}
}

// TestCopyOutRacingDestination (attack B3, the race): while `cp box:/big
// WS/res` extracts thousands of files, the host-side name res is exchanged
// (renameat2 RENAME_EXCHANGE, as the sandbox writing WS can) with a
// directory whose sub is a symlink to a host directory. Nothing may land
// there: every entry is created beneath descriptors opened one component
// at a time with O_NOFOLLOW. The old extraction, by path strings below a
// checked-once cache, wrote 4-10 files of each copy into the target.
func TestCopyOutRacingDestination(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(searchable(t, t.TempDir()), "ws")
	os.Mkdir(ws, 0o755)
	target := filepath.Join(searchable(t, t.TempDir()), "target")
	os.Mkdir(target, 0o777)
	e.must("run", "-d", "--name", "box", "--workspace", ws, e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /big/sub && head -c 20000 /dev/zero > /tmp/z && for i in $(seq 3000); do cp /tmp/z /big/sub/f$i; done")
	tries, refused := 0, 0
	for ; tries < 4; tries++ {
		res, fake := filepath.Join(ws, "res"), filepath.Join(ws, "fake")
		os.RemoveAll(res)
		os.RemoveAll(fake)
		os.Mkdir(fake, 0o755)
		os.Symlink(target, filepath.Join(fake, "sub"))
		stop, done := make(chan struct{}), make(chan struct{})
		go func() { // the sandbox: once res exists, flip it with fake, for 5s at most
			defer close(done)
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := os.Lstat(res); err == nil {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				unix.Renameat2(unix.AT_FDCWD, res, unix.AT_FDCWD, fake, unix.RENAME_EXCHANGE)
			}
		}()
		// It may fail (a symlink in the way); it must not write through it.
		if _, code := e.run("", "cp", "box:/big", res); code != 0 {
			refused++
		}
		close(stop)
		<-done
		if ents, _ := os.ReadDir(target); len(ents) > 0 {
			t.Fatalf("try %d: cp wrote %d files through the swapped-in symlink", tries, len(ents))
		}
	}
	t.Logf("%d copies (%d stopped at the symlink), none wrote through it", tries, refused)
}

// TestCopyInPlantedSymlinks (attack B4): `cp WS/link/. box:DEST` and
// `cp WS/sub/d/secret box:DEST`, where the sandbox planted link and d as
// symlinks to a directory it cannot read, must not carry that directory's
// files into it: SRC's parent, and DIR of DIR/., are opened with no
// symlink followed. Both used to copy the secret in.
func TestCopyInPlantedSymlinks(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(searchable(t, t.TempDir()), "ws")
	os.Mkdir(ws, 0o755)
	victim := filepath.Join(t.TempDir(), "victim") // 0700 parent: the sandbox cannot reach it
	os.Mkdir(victim, 0o700)
	os.WriteFile(filepath.Join(victim, "secret"), []byte("SECRET-HOST-KEY\n"), 0o600)
	e.must("run", "-d", "--name", "box", "--workspace", ws, e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "ln -s "+victim+" /workspace/link && mkdir /workspace/sub && ln -s "+victim+" /workspace/sub/d")
	for i, src := range []string{ws + "/link/.", ws + "/sub/d/secret", ws + "/link/secret", ws + "/sub/d/."} {
		if out, code := e.run("", "cp", src, fmt.Sprintf("box:/got%d", i)); code == 0 || !strings.Contains(out, "symlink") {
			t.Errorf("cp %s: exit %d: %s, want a refusal naming the symlink", src, code, out)
		}
	}
	if out, _ := e.run("", "exec", "box", "sh", "-c", "cat /got*/secret /got* 2>/dev/null; true"); strings.Contains(out, "SECRET") {
		t.Errorf("the secret reached the sandbox: %q", out)
	}
	// The symlink itself is copied as a symlink, as docker cp does.
	e.must("cp", ws+"/link", "box:/lnk")
	if out := e.must("exec", "box", "readlink", "/lnk"); strings.TrimSpace(out) != victim {
		t.Errorf("the symlink copied in: %q", out)
	}
}

// TestCopyOutHostFailureDoesNotHang (attack B6): `cp box:/big/. HOST`
// whose host side fails mid-stream (a directory where a file lands)
// exits 1 with the reason. It used to hang: the host stopped reading the
// sandbox's stream, and the helper blocked writing it.
func TestCopyOutHostFailureDoesNotHang(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /big/sub && for i in $(seq 9); do head -c 200000 /dev/zero > /big/sub/f$i; done")
	host := filepath.Join(searchable(t, t.TempDir()), "big1")
	os.MkdirAll(filepath.Join(host, "sub", "f5"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "--root", e.root, "cp", "box:/big/.", host)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("cp hung (killed after 60s): %s", out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot overwrite directory") {
		t.Errorf("cp: %v: %s, want exit 1 naming the directory in the way", err, out)
	}
}

// TestCopyReplaceRulesAsDocker (review 6): as docker cp, a file in the
// destination may be replaced by a symlink (only directory against
// non-directory is refused; the symlink is created, never followed), and
// DEST/ naming an existing file is an error ("not a directory") rather
// than an overwrite, into a sandbox and out of one.
func TestCopyReplaceRulesAsDocker(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /d/inner /src && echo keep > /d/inner/b && ln -s /etc/passwd /src/y")
	host := searchable(t, t.TempDir())
	os.WriteFile(filepath.Join(host, "y"), []byte("file"), 0o644)
	e.must("cp", "box:/src/.", host)
	if l, err := os.Readlink(filepath.Join(host, "y")); err != nil || l != "/etc/passwd" {
		t.Errorf("file replaced by the symlink: %q %v", l, err)
	}
	f := filepath.Join(host, "f")
	os.WriteFile(f, []byte("new\n"), 0o644)
	if out, code := e.run("", "cp", f, "box:/d/inner/b/"); code != 1 || !strings.Contains(out, "not a directory") {
		t.Errorf("cp f box:/d/inner/b/: exit %d: %s, want not a directory", code, out)
	}
	if out := e.must("exec", "box", "cat", "/d/inner/b"); out != "keep\n" {
		t.Errorf("b was overwritten: %q", out)
	}
	os.WriteFile(filepath.Join(host, "b"), []byte("keep\n"), 0o644)
	if out, code := e.run("", "cp", "box:/src/y", filepath.Join(host, "b")+"/"); code != 1 || !strings.Contains(out, "not a directory") {
		t.Errorf("cp box:/src/y HOST/b/: exit %d: %s, want not a directory", code, out)
	}
}

// A setuid file in a container reaches the host without its setuid and
// setgid bits through serve's archive (docker cp), as through slopbox cp:
// as root, docker cp would otherwise leave a host-root setuid binary the
// sandbox chose (an attacker's review). Build steps may set the bits, in
// the store only.
func TestServeCopyOutDropsSetid(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	ctx := t.TempDir()
	os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM "+e.ref+"\nRUN cp /bin/busybox /suid && chmod 6755 /suid\n"), 0o644)
	e.must("build", "-q", "-t", "setid-image", ctx)
	for name, bin := range dockerClients(t) {
		box := "setid-" + name
		if out, code := dockerCLI(t, bin, sock, "", "run", "-d", "--name", box, "setid-image", "sleep", "1000"); code != 0 {
			t.Fatalf("%s run: %d %s", name, code, out)
		}
		if out := e.must("exec", box, "stat", "-c", "%a", "/suid"); strings.TrimSpace(out) != "6755" {
			t.Fatalf("the image's /suid is %q, not setuid: the test proves nothing", out)
		}
		dest := filepath.Join(searchable(t, t.TempDir()), "suid")
		if out, code := dockerCLI(t, bin, sock, "", "cp", box+":/suid", dest); code != 0 {
			t.Fatalf("%s cp: %d %s", name, code, out)
		}
		fi, err := os.Stat(dest)
		if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s: docker cp left %v (%v): want no setuid or setgid bit", name, fi.Mode(), err)
		}
		dockerCLI(t, bin, sock, "", "rm", "-f", box)
	}
}
