package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// flipNames swaps the names a and b in dir with renameat2(RENAME_EXCHANGE)
// until the returned func is called, as a sandbox writing a shared
// directory can.
func flipNames(t *testing.T, dir, a, b string) func() {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer d.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(int(d.Fd()), a, int(d.Fd()), b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
		}
	}()
	var once sync.Once
	stopFn := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopFn)
	return stopFn
}

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
		stops = append(stops, flipNames(t, tree, fmt.Sprintf("f%d", i), fmt.Sprintf("s%d", i)))
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
// sandbox) refuses, as docker cp, to replace a directory with a file, and
// never turns a file into a symlink: exit 1, nothing removed. It used to
// delete the directory, and to replace the file with the sandbox's symlink.
func TestCopyIntoExistingKeepsTypes(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "mkdir -p /tmp/a /tmp/b && echo x > /tmp/a/x && ln -s /etc/shadow /tmp/b/y")
	host := searchable(t, t.TempDir())
	os.MkdirAll(filepath.Join(host, "x"), 0o755)
	os.WriteFile(filepath.Join(host, "x", "keep"), []byte("kept"), 0o644)
	os.WriteFile(filepath.Join(host, "y"), []byte("file"), 0o644)
	for _, src := range []string{"box:/tmp/a/.", "box:/tmp/b/."} {
		if out, code := e.run("", "cp", src, host); code != 1 || !strings.Contains(out, "cannot overwrite") {
			t.Errorf("cp %s %s: exit %d: %s", src, host, code, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(host, "x", "keep")); err != nil || string(b) != "kept" {
		t.Errorf("the directory in the destination: %q %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(host, "y")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the file in the destination: %v %v", fi, err)
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
