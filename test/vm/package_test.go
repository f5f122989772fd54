//go:build vmsuite

package vm

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// installed is where the Debian package (make deb) puts the binary; make
// vm-test installs the package in the guest with apt and runs the whole
// suite with SLOPBOX_BIN set to it.
const installed = "/usr/bin/slopbox"

// TestInstalledPackage: the package as a user meets it after `apt-get
// install ./slopbox_*.deb`, in the user's default store (no --root): the
// binary's version, a pull from the suite's registry, run -d, and serve
// started by the package's slopbox.socket on the first connection
// (systemd socket activation: the system units as root, the user units
// as vagrant), answering /_ping and listing the container the CLI started
// in the same store. The rest of the suite runs the same installed binary
// (doctor in TestDoctorCgroups, run --rm in TestCLISmoke).
func TestInstalledPackage(t *testing.T) {
	if bin := os.Getenv("SLOPBOX_BIN"); bin != installed {
		t.Fatalf("SLOPBOX_BIN=%q: make vm-test runs the suite with the package's %s", bin, installed)
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", "slopbox").CombinedOutput(); err != nil || string(out) != "install ok installed" {
		t.Fatalf("dpkg-query: the package is not installed: %v %q", err, out)
	}
	if out, err := exec.Command("dpkg-query", "-S", installed).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "slopbox: "+installed {
		t.Fatalf("dpkg-query -S %s: %v %q", installed, err, out)
	}
	cli := func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, installed, args...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("slopbox %v: %v\n%s", args, err, out)
		}
		return out
	}
	if out := must("version"); !strings.HasPrefix(out, "slopbox version ") {
		t.Errorf("slopbox version: %q", out)
	}

	reg := fixtures.Registry(t, nil)
	ref := reg + "/vm/package:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
	name := "vm-package-smoke"
	t.Cleanup(func() {
		cli("rm", "-f", name)
		cli("rmi", "-f", ref)
	})
	must("pull", "-q", ref)
	must("run", "-d", "--name", name, ref, "sleep", "infinity")

	// The units: root's under /usr/lib/systemd/system, a user's under
	// /usr/lib/systemd/user, each socket at serve's default path.
	kind, sock, systemctl := "system", "/run/slopbox.sock", []string{"systemctl"}
	if os.Getuid() != 0 {
		rt := os.Getenv("XDG_RUNTIME_DIR")
		if rt == "" {
			t.Fatal("no XDG_RUNTIME_DIR: the vagrant pass runs in a login session")
		}
		kind, sock, systemctl = "user", filepath.Join(rt, "slopbox.sock"), []string{"systemctl", "--user"}
	}
	sc := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(systemctl[0], append(systemctl[1:], args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v %v: %v\n%s", systemctl, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	frag, err := filepath.EvalSymlinks(sc("show", "-P", "FragmentPath", "slopbox.socket"))
	if want := "/usr/lib/systemd/" + kind + "/slopbox.socket"; err != nil || frag != want {
		t.Errorf("slopbox.socket comes from %q (%v), want the package's %s", frag, err, want)
	}
	// Stopped before the container goes: the service leaves sandboxes as
	// they are (KillMode=process), and the store keeps nothing of it.
	t.Cleanup(func() {
		exec.Command(systemctl[0], append(systemctl[1:], "stop", "slopbox.socket", "slopbox.service")...).Run()
	})
	sc("start", "slopbox.socket")
	if st := sc("show", "-P", "ActiveState", "slopbox.service"); st != "inactive" {
		t.Fatalf("slopbox.service is %s before the first connection: socket activation starts it", st)
	}

	client := &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}
	get := func(path string) []byte {
		t.Helper()
		resp, err := client.Get("http://slopbox" + path)
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, sock, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, b)
		}
		return b
	}
	if b := get("/_ping"); string(b) != "OK" {
		t.Errorf("/_ping: %q", b)
	}
	if st := sc("show", "-P", "ActiveState", "slopbox.service"); st != "active" {
		t.Errorf("slopbox.service is %s after a request on its socket", st)
	}
	if exe, err := os.Readlink("/proc/" + sc("show", "-P", "MainPID", "slopbox.service") + "/exe"); err != nil || exe != installed {
		t.Errorf("slopbox.service runs %q (%v), want %s", exe, err, installed)
	}
	var list []struct {
		Names []string
		Image string
		State string
	}
	b := get("/containers/json")
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("/containers/json: %v: %s", err, b)
	}
	found := false
	for _, c := range list {
		if len(c.Names) == 1 && c.Names[0] == "/"+name {
			found = c.State == "running"
		}
	}
	if !found {
		t.Errorf("/containers/json from the socket-activated serve lists no running %s (the CLI's, same store): %s", name, b)
	}
}
