package integration

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// activatedServe starts `slopbox serve` as systemd starts slopbox.service
// from slopbox.socket: the listening socket is fd 3, LISTEN_FDS=1 and
// LISTEN_PID is serve's own pid (sh's, which execs it). It returns the
// process's log and a function that stops it with SIGTERM and waits.
func (e *env) activatedServe(t *testing.T, ln *net.UnixListener) (*bytes.Buffer, func() error) {
	t.Helper()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"`, "sh", e.bin, "--root", e.root, "serve")
	cmd.ExtraFiles = []*os.File{f} // fd 3
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := sync.OnceValue(func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(fixtures.Patience()):
			cmd.Process.Kill()
			<-exited
			t.Errorf("serve did not exit on SIGTERM:\n%s", log.String())
			return nil
		}
	})
	t.Cleanup(func() { stop() })
	return &log, stop
}

// TestServeSocketActivation: serve takes the socket slopbox.socket passes
// (systemd's socket activation, emulated as systemd-socket-activate does
// it) instead of listening itself, answers on it, prints the DOCKER_HOST
// line for it, keeps LISTEN_* from the sandboxes, and leaves the socket,
// which is systemd's, in place when it exits: the next connection starts
// a new serve on the same socket.
func TestServeSocketActivation(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	sock := filepath.Join(searchable(t, t.TempDir()), "activated.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	defer os.Remove(sock)

	for round := 1; round <= 2; round++ {
		log, stop := e.activatedServe(t, ln)
		// The socket is listening before serve runs: the first request
		// waits in the backlog, as with systemd.
		out, code := dockerCLI(t, debianDocker, sock, "", "run", "--rm", e.ref, "sh", "-c", "echo round; env | grep ^LISTEN_ || true")
		if code != 0 || out != "round\n" {
			t.Errorf("round %d: docker run through the activated socket: exit %d %q\n%s", round, code, out, log.String())
		}
		if err := stop(); err != nil {
			t.Errorf("round %d: serve exited with %v after SIGTERM:\n%s", round, err, log.String())
		}
		if !strings.Contains(log.String(), "export DOCKER_HOST=unix://"+sock+")") {
			t.Errorf("round %d: serve's DOCKER_HOST line:\n%s", round, log.String())
		}
		if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("round %d: serve removed the activated socket: %v", round, err)
		}
		if _, err := os.Stat(sock + ".lock"); err == nil {
			t.Errorf("round %d: an activated serve made a lock file", round)
		}
	}
}

// A socket systemd passes that is not a unix stream socket is refused.
func TestServeSocketActivationRefusesTCP(t *testing.T) {
	e := newEnv(t)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"`, "sh", e.bin, "--root", e.root, "serve")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "want a unix socket") {
		t.Errorf("serve with a TCP socket passed: %v %q", err, out)
	}
}
