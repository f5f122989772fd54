// Package install checks what `make install` and `make deb` put on a
// machine, in a DESTDIR and in the package's own archive, without
// installing anything on the host running the tests: the binary, the
// completions, one man page per verb and the systemd units.
package install

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func slopboxBin(t *testing.T) string {
	bin := os.Getenv("SLOPBOX_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin/slopbox")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make build)", bin, err)
	}
	return bin
}

func script(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	p, _ := filepath.Abs("../../scripts/" + name)
	cmd := exec.Command(p, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}

// verbs are the commands that get a man page each: every available
// command under the root, as `slopbox help` lists them.
var verbs = []string{"run", "exec", "pull", "images", "cp", "logs", "ps", "rm", "serve", "doctor", "env-run", "container-ls", "image-ls", "snapshot-diff"}

// checkTree checks an installed tree at dir with prefix (as in the units'
// ExecStart) and zsh's completion directory zsh.
func checkTree(t *testing.T, dir, prefix, zsh string) {
	t.Helper()
	bin := filepath.Join(dir, prefix, "bin/slopbox")
	var version string
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the binary: %v %v", fi, err)
	} else if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "slopbox version ") {
		t.Errorf("the installed binary: %v %q", err, out)
	} else {
		version = strings.TrimSpace(strings.TrimPrefix(string(out), "slopbox version "))
	}
	// The man pages' generator is a packaging build's: the installed
	// binary does not have it (nor its markdown parser's initialisation).
	if out, err := exec.Command(bin, "__manpages", t.TempDir()).CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown command") {
		t.Errorf("the installed binary has __manpages: %v %q", err, out)
	}
	for _, c := range []struct{ path, want string }{
		{"share/bash-completion/completions/slopbox", "__start_slopbox"},
		{zsh + "/_slopbox", "#compdef slopbox"},
		{"share/fish/vendor_completions.d/slopbox.fish", "complete -c slopbox"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, prefix, c.path))
		if err != nil || !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("completion %s: %v, lacks %q", c.path, err, c.want)
		}
	}
	// bash loads it and completes the verbs.
	out, err := exec.Command("bash", "-c", `source "$1" && complete -p slopbox`, "bash", filepath.Join(dir, prefix, "share/bash-completion/completions/slopbox")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "slopbox") {
		t.Errorf("bash completion does not load: %v %q", err, out)
	}
	man := filepath.Join(dir, prefix, "share/man/man1")
	for _, v := range append([]string{""}, verbs...) {
		name := "slopbox.1.gz"
		if v != "" {
			name = "slopbox-" + v + ".1.gz"
		}
		f, err := os.Open(filepath.Join(man, name))
		if err != nil {
			t.Errorf("man page: %v", err)
			continue
		}
		zr, err := gzip.NewReader(f)
		var page []byte
		if err == nil {
			page, err = io.ReadAll(zr)
		}
		f.Close()
		// The same version as the binary beside them.
		th := fmt.Sprintf("\" \"slopbox %s\" \"slopbox manual\"\n", version)
		if err != nil || !bytes.Contains(page, []byte(".TH \"SLOPBOX\" \"1\" \"")) || !bytes.Contains(page, []byte(th)) || !bytes.Contains(page, []byte(".SH NAME")) {
			t.Errorf("man page %s: %v, want %s in\n%.200s", name, err, th, page)
		}
	}
	if pages, _ := filepath.Glob(filepath.Join(man, "*.1.gz")); len(pages) < 40 {
		t.Errorf("%d man pages, want one per verb", len(pages))
	}
	for _, kind := range []string{"user", "system"} {
		sock, err1 := os.ReadFile(filepath.Join(dir, prefix, "lib/systemd", kind, "slopbox.socket"))
		svc, err2 := os.ReadFile(filepath.Join(dir, prefix, "lib/systemd", kind, "slopbox.service"))
		if err1 != nil || err2 != nil {
			t.Errorf("%s units: %v %v", kind, err1, err2)
			continue
		}
		listen := "ListenStream=%t/slopbox.sock" // $XDG_RUNTIME_DIR, serve's default
		if kind == "system" {
			listen = "ListenStream=/run/slopbox.sock"
		}
		if !bytes.Contains(sock, []byte(listen+"\n")) || !bytes.Contains(sock, []byte("SocketMode=0600\n")) {
			t.Errorf("%s slopbox.socket:\n%s", kind, sock)
		}
		if !bytes.Contains(svc, []byte("ExecStart="+filepath.Join(prefix, "bin/slopbox")+" serve\n")) || bytes.Contains(svc, []byte("@")) {
			t.Errorf("%s slopbox.service:\n%s", kind, svc)
		}
	}
}

func TestInstallTree(t *testing.T) {
	dir := t.TempDir()
	script(t, []string{"DESTDIR=" + dir, "PREFIX=/usr", "SLOPBOX=" + slopboxBin(t)}, "install.sh")
	checkTree(t, dir, "/usr", "share/zsh/vendor-completions")
	local := t.TempDir()
	script(t, []string{"DESTDIR=" + local, "PREFIX=/usr/local", "SLOPBOX=" + slopboxBin(t)}, "install.sh")
	checkTree(t, local, "/usr/local", "share/zsh/site-functions")
}

// The units are valid for systemd: installed without DESTDIR under a
// temporary prefix, so that ExecStart names a binary that exists.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze (Debian's systemd package)")
	}
	prefix := t.TempDir()
	script(t, []string{"PREFIX=" + prefix, "SLOPBOX=" + slopboxBin(t)}, "install.sh")
	runtime := t.TempDir()
	for _, kind := range []string{"system", "user"} {
		args := []string{"--man=no", "verify", "./slopbox.socket", "./slopbox.service"}
		if kind == "user" {
			args = append([]string{"--user"}, args...)
		}
		cmd := exec.Command(analyze, args...)
		cmd.Dir = filepath.Join(prefix, "lib/systemd", kind)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("systemd-analyze verify (%s units): %v\n%s", kind, err, out)
		}
	}
}

// make deb: a package of the same tree, with its dependencies declared,
// checked with dpkg-deb and unpacked (not installed) into a directory.
func TestDebianPackage(t *testing.T) {
	out := t.TempDir()
	deb := strings.TrimSpace(script(t, []string{"SLOPBOX=" + slopboxBin(t)}, "deb.sh", out))
	if !strings.HasPrefix(filepath.Base(deb), "slopbox_") || !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("deb.sh printed %q", deb)
	}
	info, err := exec.Command("dpkg-deb", "--info", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --info: %v\n%s", err, info)
	}
	for _, want := range []string{"Package: slopbox\n", "Depends: uidmap, slirp4netns\n", "Architecture: ", "postinst"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("dpkg-deb --info lacks %q:\n%s", want, info)
		}
	}
	field, err := exec.Command("dpkg-deb", "--field", deb, "Version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(field)); v == "" || v[0] < '0' || v[0] > '9' {
		t.Errorf("Version %q: a Debian version starts with a digit", v)
	}
	// make vm-test installs the package with apt in the offline box, which
	// has no package lists: every dependency must be in the box already.
	depends, err := exec.Command("dpkg-deb", "--field", deb, "Depends").Output()
	if err != nil {
		t.Fatal(err)
	}
	box, err := os.ReadFile("../../scripts/vm-box.sh")
	if err != nil {
		t.Fatal(err)
	}
	var boxPkgs map[string]bool
	for _, line := range strings.Split(string(box), "\n") {
		if list, ok := strings.CutPrefix(line, "PKGS="); ok {
			boxPkgs = map[string]bool{}
			for _, p := range strings.Split(list, ",") {
				boxPkgs[p] = true
			}
		}
	}
	for _, dep := range strings.Split(strings.TrimSpace(string(depends)), ",") {
		// The first of alternatives, without a version constraint.
		name := strings.Fields(strings.Split(dep, "|")[0])[0]
		if !boxPkgs[name] {
			t.Errorf("the package depends on %s, which scripts/vm-box.sh's PKGS (%v) does not put in the VM box: apt cannot install it offline there", name, boxPkgs)
		}
	}
	contents, err := exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --contents: %v\n%s", err, contents)
	}
	for _, want := range []string{" root/root ", "./usr/bin/slopbox\n", "./usr/lib/systemd/system/slopbox.socket\n", "./usr/lib/systemd/user/slopbox.service\n", "./usr/share/man/man1/slopbox-run.1.gz\n"} {
		if !strings.Contains(string(contents), want) {
			t.Errorf("the package lacks %q", want)
		}
	}
	dir := t.TempDir()
	if o, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, o)
	}
	checkTree(t, dir, "/usr", "share/zsh/vendor-completions")
}
