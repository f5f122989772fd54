package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

func TestSpawnExecSmoke(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "echo hello; id; exit 42"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.ExitCode != 42 || res.Stdout[:6] != "hello\n" {
		t.Fatalf("result %+v", res)
	}
}

// TestDeepStateRoot: a state root deeper than a unix socket's path allows
// (sun_path, 108 bytes) still runs sandboxes: PID 1's socket is bound and
// dialled through its directory's descriptor. Before, every exec failed
// with "sandbox is not running" once --root passed about 80 bytes.
func TestDeepStateRoot(t *testing.T) {
	root := filepath.Join(searchableTempDir(t), strings.Repeat("d", 100), "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	b, ref := testBackendAt(t, root)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	if sock := filepath.Join(sb.dir, socketFile); len(sock) < 108 {
		t.Fatalf("the agent socket's path is %d bytes: not deep enough to test", len(sock))
	}
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "echo deep"})
	if err != nil || res.ExitCode != 0 || res.Stdout != "deep\n" {
		t.Fatalf("exec in a sandbox under a deep root: %+v, %v", res, err)
	}
}

// TestRelativeStateRoot: a backend opened on a relative root (slopbox
// --root DIR) publishes ports: its port forwarder, which runs in the
// sandbox's directory, is given the root as an absolute path.
func TestRelativeStateRoot(t *testing.T) {
	t.Chdir(searchableTempDir(t))
	// No root at all is an error, not the current directory.
	if _, err := New(""); err == nil {
		t.Error("New(\"\") opened a store")
	}
	b, ref := testBackendAt(t, "root")
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Network: backend.NetworkBridge,
		Ports: []backend.PortMapping{{HostIP: "127.0.0.1", ContainerPort: 80}}})
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "mkdir /w && echo hello > /w/index.html && httpd -p 80 -h /w"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("httpd: %+v %v", res, err)
	}
	bound := sb.rec.Bound
	if len(bound) != 1 || bound[0].HostPort == 0 {
		t.Fatalf("bound ports %+v", bound)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", bound[0].HostPort))
	if err != nil {
		t.Fatalf("GET through the published port: %v", err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "hello\n" {
		t.Fatalf("GET through the published port: %s %q", resp.Status, body)
	}
}

// TestDisposableLayerIsVolatile: a sandbox that goes with its command (run
// --rm, AutoRemove) has its writable layer mounted volatile, so neither its
// copy-ups nor its removal wait for the disk; Keep overrides that, and any
// other sandbox keeps overlayfs's syncs. Within one boot a stopped
// Disposable sandbox starts again with its files; once the host has
// restarted (its boot mark names another boot), start, diff and commit
// refuse it, as its files may be incomplete.
func TestDisposableLayerIsVolatile(t *testing.T) {
	b, ref := testBackend(t)
	rootMount := func(sb *Sandbox) string {
		t.Helper()
		res := run(t, sb, "grep ' / / ' /proc/self/mountinfo")
		if res.ExitCode != 0 {
			t.Fatalf("%+v", res)
		}
		return res.Stdout
	}
	for _, c := range []struct {
		name     string
		spec     backend.SpawnSpec
		volatile bool
	}{
		{"disposable", backend.SpawnSpec{Disposable: true}, true},
		{"autoremove", backend.SpawnSpec{AutoRemove: true}, true},
		{"disposable but kept", backend.SpawnSpec{Disposable: true, Keep: true}, false},
		{"plain", backend.SpawnSpec{}, false},
	} {
		c.spec.Image, c.spec.DisableSetup = ref, true
		sb := spawnT(t, b, c.spec)
		if got := strings.Contains(rootMount(sb), "volatile"); got != c.volatile {
			t.Fatalf("%s: root mount %q", c.name, rootMount(sb))
		}
		if c.spec.AutoRemove {
			continue // a stop removes it
		}
		if res := run(t, sb, "echo x >> /etc/passwd"); res.ExitCode != 0 {
			t.Fatalf("%s: %+v", c.name, res)
		}
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := sb.Start(context.Background()); err != nil {
			t.Fatalf("%s: start again in the same boot: %v", c.name, err)
		}
		if res := run(t, sb, "tail -n1 /etc/passwd"); res.Stdout != "x\n" {
			t.Fatalf("%s: after a restart: %+v", c.name, res)
		}
		if got := strings.Contains(rootMount(sb), "volatile"); got != c.volatile {
			t.Fatalf("%s: root mount after a restart %q", c.name, rootMount(sb))
		}
		if !c.volatile {
			continue
		}
		// As if the host had restarted since the layer was mounted.
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
		marks, _ := filepath.Glob(filepath.Join(sb.dir, ".volatile-boot-*"))
		if len(marks) != 1 {
			t.Fatalf("boot marks %q", marks)
		}
		if err := os.Rename(marks[0], filepath.Join(sb.dir, ".volatile-boot-00000000-0000-0000-0000-000000000000")); err != nil {
			t.Fatal(err)
		}
		refused := func(how string) {
			t.Helper()
			for what, err := range map[string]error{
				"start":  sb.Start(context.Background()),
				"diff":   func() error { _, err := sb.Changes(); return err }(),
				"commit": sb.WithUpperDir(true, func(string) error { return nil }),
			} {
				if err == nil || !strings.Contains(err.Error(), "host has restarted") {
					t.Fatalf("%s: %s of a layer %s: %v", c.name, what, how, err)
				}
			}
		}
		refused("from an earlier boot")
		// The mark of this boot lost (a crash before it reached the disk):
		// the layer is refused still.
		if err := os.Remove(filepath.Join(sb.dir, ".volatile-boot-00000000-0000-0000-0000-000000000000")); err != nil {
			t.Fatal(err)
		}
		refused("whose boot is not on record")
	}
}

// TestOpenByShortID: the 12-character id ps -q prints opens its sandbox
// (from the directory's names, without reading every record), and a
// prefix no sandbox has is not found.
func TestOpenByShortID(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	got, err := b.Open(sb.ID()[:12])
	if err != nil || got.ID() != sb.ID() {
		t.Fatalf("open %s: %v, %v", sb.ID()[:12], got, err)
	}
	other := "0"
	if sb.ID()[0] == '0' {
		other = "1"
	}
	if _, err := b.Open(other + sb.ID()[1:12]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open of a prefix no sandbox has: %v", err)
	}
}

// TestFailedStartLeavesItStopped: a start of a stopped sandbox whose
// command can no longer run fails as docker's does, and leaves the
// sandbox stopped: the PID 1 that start made does not stay behind,
// running and counted as the sandbox's.
func TestFailedStartLeavesItStopped(t *testing.T) {
	b, ref := testBackend(t)
	ws := workspaceDir(t)
	script := filepath.Join(ws, "main.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := b.Create(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true}, []string{"/workspace/main.sh"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Remove(); err != nil {
			t.Errorf("rm: %v", err)
		}
	})
	ctx := context.Background()
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(script); err != nil {
		t.Fatal(err)
	}
	err = sb.Start(ctx)
	var se *StartError
	if !errors.As(err, &se) || se.Code != 127 {
		t.Fatalf("start of a command that is gone: %v; want a StartError with code 127", err)
	}
	if sb.Running() || sb.rec.alive() {
		t.Fatalf("after the failed start PID 1 (%d) runs still: running %v, alive %v", sb.rec.Pid, sb.Running(), sb.rec.alive())
	}
	again, err := b.Open(sb.ID())
	if err != nil || again.Running() {
		t.Fatalf("as another process reads it: %v, running %v", err, again != nil && again.Running())
	}
	// Its exit says why, as docker's inspect of a start that failed.
	if i := again.Info(); i.ExitCode != 127 || i.FinishedAt.IsZero() {
		t.Errorf("after the failed start: exit %d, finished at %v; want 127 and a time", i.ExitCode, i.FinishedAt)
	}
	// The command back: the sandbox starts again.
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil || !sb.Running() {
		t.Fatalf("start once the command is back: %v, running %v", err, sb.Running())
	}
}
