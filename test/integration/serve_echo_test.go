package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestServeArchiveStoppedMounts: PUT and GET /containers/{id}/archive of a
// created or stopped container below its volume (docker-py's ArchiveTest:
// put_archive into a created container's -v /vol1, get_archive of a file
// the stopped container wrote there) are done on the host in the volume's
// directory; a path in its own filesystem is refused (409), a read-only
// volume too, and a symlink the container planted in its volume is not
// followed to the host. Before: 409 for any PUT, 404 for the GET.
func TestServeArchiveStoppedMounts(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	src := searchable(t, t.TempDir())
	if err := os.WriteFile(src+"/in.txt", []byte("put before start\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must("create", "--name", "ac", "-v", "/vol1", e.ref, "cat", "/vol1/in.txt")
	must("cp", src+"/in.txt", "ac:/vol1/")
	if out := must("start", "-a", "ac"); out != "put before start\n" {
		t.Errorf("a file put into a created container's volume: %q", out)
	}
	must("run", "--name", "wrote", "-v", "/vol1", e.ref, "sh", "-c", "echo -n data > /vol1/data.txt && ln -s "+src+" /vol1/link")
	dst := t.TempDir()
	must("cp", "wrote:/vol1/data.txt", dst+"/data.txt")
	if b, err := os.ReadFile(dst + "/data.txt"); err != nil || string(b) != "data" {
		t.Errorf("a file a stopped container wrote in its volume: %q %v", b, err)
	}
	must("cp", "wrote:/vol1/.", dst+"/all")
	if target, err := os.Readlink(dst + "/all/link"); err != nil || target != src {
		t.Errorf("the volume's symlink, copied out: %q %v", target, err)
	}
	// Into the symlink the container planted: refused, not followed.
	if out, code := dockerCLI(t, debianDocker, sock, "", "cp", src+"/in.txt", "wrote:/vol1/link/"); code == 0 {
		t.Errorf("a copy through the container's symlink in its volume succeeded: %q", out)
	}
	if names, _ := os.ReadDir(src); len(names) != 1 {
		t.Errorf("the host directory the symlink names was written: %v", names)
	}
	// Its own filesystem: only while it runs.
	if out, code := dockerCLI(t, debianDocker, sock, "", "cp", src+"/in.txt", "wrote:/etc/"); code == 0 || !strings.Contains(out, "start it first") {
		t.Errorf("a copy into a stopped container's own filesystem: %d %q", code, out)
	}
	must("create", "--name", "ro", "-v", "rovol:/ro:ro", e.ref, "true")
	if out, code := dockerCLI(t, debianDocker, sock, "", "cp", src+"/in.txt", "ro:/ro/"); code == 0 || !strings.Contains(out, "read-only") {
		t.Errorf("a copy into a read-only volume: %d %q", code, out)
	}
	must("rm", "-f", "-v", "ac", "wrote", "ro")
	must("volume", "rm", "rovol")
}

// TestServeCreateEchoes: inspect shows the create fields Docker shows, as
// dockerd does (docker-py's CreateContainerTest and ContainerCPUTest:
// CpusetCpus, Runtime, VolumesFrom, Init, Isolation, MacAddress,
// MemorySwap, MemorySwappiness, StopTimeout, VolumeDriver); StopTimeout is
// the stop's grace period; a tmpfs at any path; links' environment
// (test_create_with_links) and DELETE of a link; rm of a running
// container refused in dockerd's words (errors_test); commit's image
// shape (CommitTest) and rmi's answer (RemoveImageTest). Before: the
// fields were missing (KeyError), a tmpfs only at /tmp, no links.
func TestServeCreateEchoes(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "-d", "--name", "linked", "-e", "FOO=1", "-v", "/shared", e.ref, "sleep", "1000")
	var created struct {
		ID       string `json:"Id"`
		Warnings []string
	}
	engineJSON(t, sock, http.MethodPost, "/containers/create?name=echo", map[string]any{
		"Image": e.ref, "Cmd": []string{"sh", "-c", "env; df /tmp1 | tail -1; trap 'exit 3' TERM; sleep 1000 & wait"},
		"MacAddress": "02:42:ac:11:00:0a", "StopTimeout": 1,
		"HostConfig": map[string]any{
			"CpusetCpus": "0", "Runtime": "runc", "VolumesFrom": []string{"linked:ro"}, "Init": true, "Isolation": "default",
			"Memory": 64 << 20, "MemorySwap": 128 << 20, "MemorySwappiness": 40, "VolumeDriver": "local",
			"Tmpfs": map[string]string{"/tmp1": "size=3M"}, "Links": []string{"linked:mylink"},
		},
	}, http.StatusCreated, &created)
	// Each field slopbox does not apply is named in a warning.
	for _, f := range []string{"CpusetCpus", "MemorySwap", "MemorySwappiness", "MacAddress"} {
		if !slices.ContainsFunc(created.Warnings, func(w string) bool { return strings.HasPrefix(w, f+" ") }) {
			t.Errorf("no create warning for %s: %q", f, created.Warnings)
		}
	}
	var in struct {
		HostConfig      map[string]any
		Config          map[string]any
		NetworkSettings map[string]any
		Mounts          []struct{ Destination string }
	}
	engineJSON(t, sock, http.MethodGet, "/containers/echo/json", nil, http.StatusOK, &in)
	for k, want := range map[string]any{"CpusetCpus": "0", "Runtime": "runc", "Init": true, "Isolation": "default",
		"MemorySwap": float64(128 << 20), "MemorySwappiness": float64(40), "VolumeDriver": "local", "ShmSize": float64(64 << 20)} {
		if got := in.HostConfig[k]; got != want {
			t.Errorf("HostConfig.%s: %v, want %v", k, got, want)
		}
	}
	if v, _ := json.Marshal(in.HostConfig["VolumesFrom"]); string(v) != `["linked:ro"]` {
		t.Errorf("HostConfig.VolumesFrom: %s", v)
	}
	if v, _ := json.Marshal(in.HostConfig["Tmpfs"]); string(v) != `{"/tmp1":"size=3M"}` {
		t.Errorf("HostConfig.Tmpfs: %s", v)
	}
	if len(in.HostConfig) < 60 {
		t.Errorf("HostConfig has %d keys, dockerd's 64", len(in.HostConfig))
	}
	if in.Config["StopTimeout"] != float64(1) || in.Config["MacAddress"] != "02:42:ac:11:00:0a" || in.NetworkSettings["MacAddress"] != "02:42:ac:11:00:0a" {
		t.Errorf("Config.StopTimeout, MacAddress: %v %v %v", in.Config["StopTimeout"], in.Config["MacAddress"], in.NetworkSettings["MacAddress"])
	}
	if !slices.ContainsFunc(in.Mounts, func(m struct{ Destination string }) bool { return m.Destination == "/shared" }) {
		t.Errorf("VolumesFrom: the other's volume is not mounted: %+v", in.Mounts)
	}
	must("start", "echo")
	out := waitLogs(t, must, "echo", "/tmp1")
	for _, want := range []string{"MYLINK_NAME=/echo/mylink", "MYLINK_ENV_FOO=1", "tmpfs"} {
		if !strings.Contains(out, want) {
			t.Errorf("the linked container's output lacks %q: %q", want, out)
		}
	}
	code, b := engineDo(t, sock, http.MethodDelete, "/containers/echo", nil)
	if code != http.StatusConflict || !strings.Contains(string(b), "You cannot remove a running container "+created.ID+". Stop the container before attempting removal or force remove") {
		t.Errorf("rm of a running container: %d %s", code, b)
	}
	// StopTimeout 1: TERM is trapped by sh, which waits; the stop kills
	// after 1 s, not the default 10.
	start := time.Now()
	must("stop", "echo")
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("stop of a container with StopTimeout 1 took %v", d)
	}
	if code, b := engineDo(t, sock, http.MethodDelete, "/containers/echo/mylink?link=1", nil); code != http.StatusNoContent {
		t.Errorf("DELETE of a link: %d %s", code, b)
	}
	engineJSON(t, sock, http.MethodGet, "/containers/echo/json", nil, http.StatusOK, &in)
	if in.HostConfig["Links"] != nil {
		t.Errorf("HostConfig.Links after the link's removal: %v", in.HostConfig["Links"])
	}

	// commit: Docker's shape; rmi: Untagged, then Deleted.
	must("run", "--name", "tocommit", e.ref, "touch", "/test")
	var res struct{ ID string }
	engineJSON(t, sock, http.MethodPost, "/commit?container=tocommit", nil, http.StatusCreated, &res)
	var img, parent struct {
		ID              string `json:"Id"`
		Container       string
		Parent          string
		ContainerConfig struct{ Image string }
	}
	engineJSON(t, sock, http.MethodGet, "/images/"+res.ID+"/json", nil, http.StatusOK, &img)
	engineJSON(t, sock, http.MethodGet, "/images/"+e.ref+"/json", nil, http.StatusOK, &parent)
	tc := strings.TrimSpace(must("inspect", "-f", "{{.Id}}", "tocommit"))
	if img.Container != tc || img.Parent != parent.ID || img.ContainerConfig.Image != dockerName(e.ref) {
		t.Errorf("committed image: Container %q Parent %q ContainerConfig.Image %q, want %q %q %q", img.Container, img.Parent, img.ContainerConfig.Image, tc, parent.ID, dockerName(e.ref))
	}
	var removed []map[string]string
	engineJSON(t, sock, http.MethodDelete, "/images/"+res.ID+"?force=1", nil, http.StatusOK, &removed)
	if v, _ := json.Marshal(removed); string(v) != `[{"Deleted":"`+res.ID+`"}]` {
		t.Errorf("rmi of an unnamed image: %s", v)
	}
	engineJSON(t, sock, http.MethodPost, "/commit?container=tocommit&repo=committed&tag=v1", nil, http.StatusCreated, &res)
	removed = nil
	engineJSON(t, sock, http.MethodDelete, "/images/committed:v1?force=1", nil, http.StatusOK, &removed)
	if v, _ := json.Marshal(removed); string(v) != `[{"Untagged":"committed:v1"},{"Deleted":"`+res.ID+`"}]` {
		t.Errorf("rmi of a tagged image: %s", v)
	}
	must("rm", "-f", "-v", "echo", "linked", "tocommit")
}

// waitLogs is the container's log once it holds want.
func waitLogs(t *testing.T, must func(args ...string) string, name, want string) string {
	t.Helper()
	var out string
	fixtures.Eventually(t, name+"'s log holds "+want, func() (bool, string) {
		out = must("logs", name)
		return strings.Contains(out, want), out
	})
	return out
}

// dockerName is a reference as Docker prints it.
func dockerName(ref string) string {
	return strings.TrimPrefix(strings.TrimPrefix(ref, "index.docker.io/"), "library/")
}
