package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tarGz is a gzipped tar of entries, made in memory.
func tarGz(t *testing.T, entries []tar.Header, bodies map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := bodies[h.Name]
		h.Size = int64(len(body))
		if h.Typeflag == tar.TypeDir {
			h.Size = 0
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// debPackage is a .deb (an ar archive: debian-binary, control.tar.gz,
// data.tar.gz) written in memory, so that its setuid and setgid payload
// never exists as a file outside the image; the test needs no dpkg-deb.
func debPackage(t *testing.T, name string, payload []tar.Header, bodies map[string]string) []byte {
	t.Helper()
	control := fmt.Sprintf("Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: slopbox tests <t@example.invalid>\nDescription: installs setuid and setgid files\n", name)
	members := []struct {
		name string
		body []byte
	}{
		{"debian-binary", []byte("2.0\n")},
		{"control.tar.gz", tarGz(t, []tar.Header{{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "./control", Typeflag: tar.TypeReg, Mode: 0o644}}, map[string]string{"./control": control})},
		{"data.tar.gz", tarGz(t, payload, bodies)},
	}
	var ar bytes.Buffer
	ar.WriteString("!<arch>\n")
	for _, m := range members {
		fmt.Fprintf(&ar, "%-16s%-12d%-6d%-6d%-8o%-10d`\n", m.name, 0, 0, 0, 0o100644, len(m.body))
		ar.Write(m.body)
		if len(m.body)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	return ar.Bytes()
}

// layerHeaders reads the image's layers (through Store.Save, what save and
// push send) and returns the last header each path has.
func layerHeaders(t *testing.T, save func(io.Writer) error) map[string]*tar.Header {
	t.Helper()
	var buf bytes.Buffer
	if err := save(&buf); err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	outer := tar.NewReader(&buf)
	for {
		h, err := outer.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(outer)
		var r io.Reader = bytes.NewReader(body)
		if len(body) > 2 && body[0] == 0x1f && body[1] == 0x8b {
			if r, err = gzip.NewReader(bytes.NewReader(body)); err != nil {
				continue
			}
		}
		inner := tar.NewReader(r)
		for {
			ih, err := inner.Next()
			if err != nil {
				break
			}
			out[strings.TrimPrefix(ih.Name, "./")] = ih
		}
		_ = h
	}
	return out
}

// setidFiles lists the setuid and setgid files below root with their
// owners (what the caller can see: unreadable directories are skipped).
func setidFiles(root string) map[string]unix.Stat_t {
	out := map[string]unix.Stat_t{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o6000 != 0 {
			out[p] = st
		}
		return nil
	})
	return out
}

// TestBuildSetuidPackage: a package that installs setuid and setgid files
// (passwd's and sudo's shape: a .deb installed by dpkg -i in a RUN step)
// builds, and so does a RUN that makes them with chmod u+s and chmod
// 4755 (busybox has no install). The built image has the bits (in its layer tars and when it runs);
// on the host they are only in the layer store, on files the caller's
// uid and host root do not own (the store's user namespace's ids), and no
// setuid file appears in a directory the caller owns (context, temporary
// directory, the store's own files).
func TestBuildSetuidPackage(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	deb := debPackage(t, "suidpkg", []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/passwd", Typeflag: tar.TypeReg, Mode: 0o4755},
		{Name: "./usr/bin/pkg-chage", Typeflag: tar.TypeReg, Mode: 0o2755, Gid: 42},
	}, map[string]string{"./usr/bin/passwd": string(bb), "./usr/bin/pkg-chage": string(bb)})
	dir := writeContext(t, map[string]string{
		"suidpkg.deb": string(deb),
		"Dockerfile": `FROM base
COPY suidpkg.deb /tmp/
RUN mkdir -p /var/lib/dpkg/info /var/lib/dpkg/updates && touch /var/lib/dpkg/status && \
    busybox dpkg -i /tmp/suidpkg.deb && rm /tmp/suidpkg.deb && busybox dpkg -l | grep suidpkg
RUN cp /bin/busybox /usr/bin/made-suid && chmod u+s /usr/bin/made-suid && \
    cp /bin/busybox /usr/bin/installed-suid && chmod 4755 /usr/bin/installed-suid
`})
	tmp := searchableTempDir(t)
	t.Setenv("TMPDIR", tmp)
	var out bytes.Buffer
	if _, err := New(b).Build(ctx, Options{ContextDir: dir, Tags: []string{"suid"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "suidpkg") {
		t.Errorf("dpkg -l does not list the package:\n%s", out.String())
	}

	want := map[string]int64{"usr/bin/passwd": 0o4755, "usr/bin/pkg-chage": 0o2755, "usr/bin/made-suid": 0o4755, "usr/bin/installed-suid": 0o4755}
	hdrs := layerHeaders(t, func(w io.Writer) error { return b.Store().Save([]string{"suid"}, w) })
	for p, mode := range want {
		h, ok := hdrs[p]
		if !ok {
			t.Errorf("%s is not in the image's layers", p)
			continue
		}
		if h.Mode&0o7777 != mode || h.Uid != 0 {
			t.Errorf("%s in the layer tar: mode %#o uid %d, want %#o uid 0", p, h.Mode&0o7777, h.Uid, mode)
		}
	}
	if h := hdrs["usr/bin/pkg-chage"]; h != nil && h.Gid != 42 {
		t.Errorf("pkg-chage's group in the layer: %d, want 42", h.Gid)
	}
	got := runIn(t, b, "suid", "0:0", "stat -c '%a %u:%g %n' /usr/bin/passwd /usr/bin/pkg-chage /usr/bin/made-suid /usr/bin/installed-suid; /usr/bin/passwd --help 2>&1 | head -1")
	for _, w := range []string{"4755 0:0 /usr/bin/passwd", "2755 0:42 /usr/bin/pkg-chage", "4755 0:0 /usr/bin/made-suid", "4755 0:0 /usr/bin/installed-suid", "BusyBox"} {
		if !strings.Contains(got, w) {
			t.Errorf("the image run shows %q, lacking %q", got, w)
		}
	}

	// On the host: the bits are in the store's layers only. As root they
	// are on files of the store's user namespace's ids, never host root's;
	// rootless, container root is the caller, so the files are the
	// caller's, in a layer store no one else can enter (0700). Everything
	// this test made (the context, the backend's root with the store,
	// TMPDIR) is below one directory.
	layers := filepath.Join(b.Store().Root(), "layers")
	if fi, err := os.Stat(layers); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the layer store %s is open to others: %v %v", layers, fi.Mode(), err)
	}
	found := 0
	for p, st := range setidFiles(filepath.Dir(tmp)) {
		switch {
		case st.Uid == 0 || st.Gid == 0 && st.Mode&0o2000 != 0:
			t.Errorf("%s is setuid/setgid (mode %#o) and host root's (%d:%d)", p, st.Mode&0o7777, st.Uid, st.Gid)
		case !strings.HasPrefix(p, layers+"/"):
			t.Errorf("%s is setuid/setgid (mode %#o, owner %d) outside the layer store", p, st.Mode&0o7777, st.Uid)
		case os.Getuid() == 0 && int(st.Uid) < 65536:
			t.Errorf("%s is setuid (mode %#o) to host uid %d, not a subordinate id", p, st.Mode&0o7777, st.Uid)
		default:
			found++
		}
	}
	if found < len(want) {
		t.Errorf("found %d setuid/setgid files in the layer store %s, want at least %d", found, layers, len(want))
	}
}
