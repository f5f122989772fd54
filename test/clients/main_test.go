package clients

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The serve every test of the package talks to, on a state root of its
// own with a busybox image imported as busybox:latest (no registry is
// reachable here; clients find the image in the store and pull nothing).
var (
	slopbox string // the binary
	root    string // serve's state root
	sock    string // serve's socket
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	slopbox = os.Getenv("SLOPBOX_BIN")
	if slopbox == "" {
		slopbox, _ = filepath.Abs("../../bin/slopbox")
	}
	if _, err := os.Stat(slopbox); err != nil {
		fmt.Fprintf(os.Stderr, "the client tests need the slopbox binary (make build, or SLOPBOX_BIN): %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "clients.")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o711)
	root, sock = filepath.Join(dir, "root"), filepath.Join(dir, "s.sock")
	if err := importBusybox(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	serve := exec.Command(slopbox, "--root", root, "serve", "--socket", sock)
	var log bytes.Buffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
		// What a failed test left: every sandbox goes with the root.
		if out, _ := exec.Command(slopbox, "--root", root, "ps", "-aq").Output(); len(bytes.TrimSpace(out)) > 0 {
			fmt.Fprintf(os.Stderr, "sandboxes left behind: %s", out)
			exec.Command(slopbox, append([]string{"--root", root, "rm", "-f"}, strings.Fields(string(out))...)...).Run()
		}
		// The root's network helper ends once no container is on a
		// network and no client is connected: it is given the time to see
		// that, and one that stays is a leak the run reports.
		if pids := helpersOf(filepath.Join(root, "networks")); len(pids) > 0 {
			for start := time.Now(); len(pids) > 0 && time.Since(start) < 10*time.Second; pids = helpersOf(filepath.Join(root, "networks")) {
				time.Sleep(50 * time.Millisecond)
			}
			if len(pids) > 0 {
				fmt.Fprintf(os.Stderr, "the network helper of %s did not exit (pids %v)\n", root, pids)
				for _, p := range pids {
					syscall.Kill(p, syscall.SIGKILL)
				}
				code = 1
			}
		}
	}()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			fmt.Fprintf(os.Stderr, "slopbox serve did not listen on %s:\n%s", sock, log.String())
			return 1
		}
	}
	// The clients find the engine as they would find dockerd's.
	os.Setenv("DOCKER_HOST", "unix://"+sock)
	os.Setenv("DOCKER_CONFIG", filepath.Join(dir, "docker-config"))
	// Ryuk, testcontainers' reaper, is an image from Docker Hub; the
	// tests terminate what they start themselves.
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	// On a machine that looks like a container (/.dockerenv, as these
	// VMs have) testcontainers asks the bridge network's gateway for
	// the host; slopbox publishes ports on the host's 127.0.0.1.
	os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
	code = m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "serve log:\n%s", log.String())
	}
	return code
}

// importBusybox imports Debian's static busybox as busybox:latest.
func importBusybox(dir string) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("the client tests need busybox-static's /bin/busybox: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "tmp/", "etc/", "usr/", "usr/local/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %v", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	tw.Close()
	tarball := filepath.Join(dir, "busybox.tar")
	if err := os.WriteFile(tarball, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command(slopbox, "--root", root, "import", tarball, "busybox:latest").CombinedOutput(); err != nil {
		return fmt.Errorf("slopbox import: %v\n%s", err, out)
	}
	return nil
}

// helpersOf lists the processes whose arguments name dir: the network
// helper of a state root is started as "slopbox ROOT/networks".
func helpersOf(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == dir {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
