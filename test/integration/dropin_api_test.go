package integration

import (
	"strings"
	"testing"
)

// TestNamedVolumes: a named volume keeps what a sandbox wrote for the
// next one (the CLI's -v NAME:/path and --mount type=volume, docker's
// volume verbs, in the docker-argv mode too); a volume a sandbox uses is
// not removed; the docker CLI through serve sees the same volumes.
func TestNamedVolumes(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	if out := e.must("volume", "create", "--label", "k=v", "data1"); out != "data1\n" {
		t.Errorf("volume create: %q", out)
	}
	t.Cleanup(func() { e.run("", "volume", "rm", "-f", "data1", "data2") })
	// Written by container root (the directory is the sandbox root's, as
	// Docker's), then read by the next sandbox.
	e.must("run", "--rm", "-v", "data1:/data", e.ref, "sh", "-c", "echo kept > /data/f && mkdir /data/d")
	if out := e.must("run", "--rm", "--mount", "type=volume,source=data1,target=/v,readonly", e.ref, "sh", "-c", "cat /v/f; touch /v/no 2>/dev/null || echo ro"); out != "kept\nro\n" {
		t.Errorf("second sandbox over the volume: %q", out)
	}
	// -v with a name that does not exist makes the volume, as Docker's.
	e.must("run", "--rm", "-v", "data2:/data", e.ref, "true")
	if out, code := e.docker("", "volume", "ls", "-q"); code != 0 || out != "data1\ndata2\n" {
		t.Errorf("docker volume ls -q: %d %q", code, out)
	}
	if out := e.must("volume", "ls", "--filter", "label=k=v", "-q"); out != "data1\n" {
		t.Errorf("volume ls --filter label=k=v: %q", out)
	}
	if out := e.must("volume", "inspect", "data1"); !strings.Contains(out, `"Driver": "local"`) || !strings.Contains(out, `"k": "v"`) {
		t.Errorf("volume inspect: %s", out)
	}
	// In use by a sandbox, even one not running: refused, with -f too.
	e.must("create", "--name", "holder", "-v", "data1:/data", e.ref, "true")
	for _, args := range [][]string{{"volume", "rm", "data1"}, {"volume", "rm", "-f", "data1"}} {
		if out, code := e.run("", args...); code == 0 || !strings.Contains(out, "volume is in use") {
			t.Errorf("%v of a volume in use: %d %q", args, code, out)
		}
	}
	if out := e.must("volume", "prune", "-a"); !strings.Contains(out, "data2") || strings.Contains(out, "data1") {
		t.Errorf("volume prune -a: %q", out)
	}
	e.must("rm", "holder")
	e.must("volume", "rm", "data1")
	if out, code := e.run("", "volume", "inspect", "data1"); code != 1 || !strings.Contains(out, "no such volume") {
		t.Errorf("inspect of a removed volume: %d %q", code, out)
	}
	if out, code := e.run("", "volume", "create", "bad/name"); code == 0 || !strings.Contains(out, "invalid characters") {
		t.Errorf("volume create bad/name: %d %q", code, out)
	}

	// The docker CLI through serve: the same volumes, and a 409 for one
	// in use.
	sock := e.serve(t)
	docker := func(args ...string) (string, int) { return dockerCLI(t, debianDocker, sock, "", args...) }
	if out, code := docker("volume", "create", "web"); code != 0 || out != "web\n" {
		t.Fatalf("docker volume create: %d %q", code, out)
	}
	t.Cleanup(func() { e.run("", "volume", "rm", "-f", "web") })
	if out, code := docker("run", "--rm", "-v", "web:/w", e.ref, "sh", "-c", "echo hi > /w/x"); code != 0 {
		t.Fatalf("docker run -v web:/w: %d %q", code, out)
	}
	if out := e.must("run", "--rm", "-v", "web:/w", e.ref, "cat", "/w/x"); out != "hi\n" {
		t.Errorf("the CLI reads what docker's run wrote: %q", out)
	}
	if out, code := docker("create", "--name", "user1", "-v", "web:/w", e.ref, "true"); code != 0 {
		t.Fatalf("docker create: %d %q", code, out)
	}
	if out, code := docker("inspect", "-f", "{{range .Mounts}}{{.Type}} {{.Name}} {{.Destination}}{{end}}", "user1"); code != 0 || out != "volume web /w\n" {
		t.Errorf("inspect Mounts: %d %q", code, out)
	}
	if out, code := docker("volume", "rm", "web"); code == 0 || !strings.Contains(out, "volume is in use") {
		t.Errorf("docker volume rm of a volume in use: %d %q", code, out)
	}
	docker("rm", "user1")
	if out, code := docker("volume", "rm", "web"); code != 0 {
		t.Errorf("docker volume rm: %d %q", code, out)
	}
}
