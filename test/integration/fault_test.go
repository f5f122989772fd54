package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// leftovers lists what anything slopbox made under e.root still holds on
// the host: processes (a sandbox's PID 1 and its host-side network helpers
// carry its id in their environment; others hold files under the root), mounts under the root,
// and cgroups of the given sandbox ids.
func (e *env) leftovers(ids map[string]bool) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for id := range ids {
			if strings.Contains(string(environ), "_SLOPBOX_SANDBOX="+id+"\x00") {
				out = append(out, fmt.Sprintf("process %d of sandbox %s", pid, id))
			}
			if strings.Contains(string(environ), "_SLOPBOX_HELPER_OF="+id+"\x00") {
				out = append(out, fmt.Sprintf("helper process %d (slirp4netns or port forwarder) of sandbox %s", pid, id))
			}
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && strings.HasPrefix(cwd, e.root+"/") {
			out = append(out, fmt.Sprintf("process %d works in %s", pid, cwd))
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, e.root+"/") {
				out = append(out, fmt.Sprintf("process %d holds %s", pid, l))
				break
			}
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if fields := strings.Fields(s.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], e.root) {
				out = append(out, "mount "+fields[4])
			}
		}
		f.Close()
	}
	for id := range ids {
		matches, _ := filepath.Glob("/sys/fs/cgroup/*/slopbox/" + id)
		m2, _ := filepath.Glob("/sys/fs/cgroup/slopbox/" + id)
		for _, m := range append(matches, m2...) {
			out = append(out, "cgroup "+m)
		}
	}
	return out
}

// killOwnerThenPrune checks that prune leaves the running sandbox of a
// live foreground slopbox process (cmd: run or env run, serving on host
// port port) alone, SIGKILLs that process, and checks that prune alone
// then removes the sandbox: none listed, nothing of it left on the host
// (PID 1, slirp4netns, forwarder, mounts, cgroups) and the port free.
func (e *env) killOwnerThenPrune(t *testing.T, cmd *exec.Cmd, port int, what string) {
	t.Helper()
	ids := e.sandboxDirs()
	if len(ids) == 0 {
		t.Fatal("no sandbox directory under the root")
	}
	e.must("prune")
	if len(e.sandboxDirs()) != len(ids) {
		t.Fatalf("prune removed the sandbox of a live %s", what)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	e.must("prune")
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("prune left %q", out)
	}
	fixtures.Eventually(t, "nothing left after SIGKILL of "+what+" and prune", func() (bool, string) {
		left := e.leftovers(ids)
		return len(left) == 0, strings.Join(left, "\n")
	})
	if err := canBind("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("prune after SIGKILL of %s did not release host port %d: %v", what, port, err)
	}
}

// httpBody GETs url and returns the body.
func httpBody(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sandboxDirs returns the ids of every sandbox directory under the root,
// pool entries included.
func (e *env) sandboxDirs() map[string]bool {
	ids := map[string]bool{}
	for _, dir := range []string{filepath.Join(e.root, "c"), filepath.Join(e.root, "c", ".pool")} {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			if ent.IsDir() && !strings.HasPrefix(ent.Name(), ".") {
				ids[ent.Name()] = true
			}
		}
	}
	return ids
}

// SIGKILL of slopbox at any point (mid-spawn, mid-exec, mid-rm, mid-prune,
// mid-pull), then `ps`/`rm -f`/`prune`, leaves the host clean: processes,
// mounts, cgroups and state.
func TestSIGKILLAnywhereThenPruneLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	e.must("run", "-d", "--name", "base", "--memory", "64m", e.ref, "sleep", "1000")
	seen := map[string]bool{}
	scenarios := [][]string{
		{"run", "-d", "--name", "victim", "--memory", "64m", e.ref, "sleep", "1000"},
		{"run", "-d", "--name", "victim", "--network", "bridge", "-p", "0:80", e.ref, "sleep", "1000"},
		{"run", "--rm", "--pids-limit", "50", e.ref, "sh", "-c", "sleep 100 & busybox setsid sleep 100 & sleep 100"},
		{"exec", "base", "sh", "-c", "sleep 100 & busybox setsid sleep 100 & sleep 100"},
		{"rm", "-f", "base"},
		{"prune"},
		{"pull", e.ref},
	}
	for _, args := range scenarios {
		for _, delay := range []time.Duration{2 * time.Millisecond, 15 * time.Millisecond, 40 * time.Millisecond, 120 * time.Millisecond} {
			cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(delay)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			for id := range e.sandboxDirs() {
				seen[id] = true
			}
			// ps must not fail, whatever state the kill left.
			if out, code := e.run("", "ps", "-a"); code != 0 {
				t.Fatalf("ps after killing %v at %v: exit %d: %s", args, delay, code, out)
			}
			e.run("", "rm", "-f", "victim")
			if _, code := e.run("", "inspect", "base"); code != 0 {
				e.must("run", "-d", "--name", "base", "--memory", "64m", e.ref, "sleep", "1000")
			}
		}
	}
	// At least one kill lands on a sandbox half made, however slow the
	// host (the fixed delays above can all come too early under load): a
	// run killed once its state directory has appeared under c/, which
	// happens once its PID 1 runs, before the claim (as root, the
	// directory under c/.pool comes earlier: Prewarm's reservation).
	before := e.sandboxDirs()
	late := exec.Command(e.bin, "--root", e.root, "run", "-d", "--name", "late", "--memory", "64m", e.ref, "sleep", "1000")
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "a new sandbox's state directory", func() (bool, string) {
		ents, _ := os.ReadDir(filepath.Join(e.root, "c"))
		for _, ent := range ents {
			if ent.IsDir() && !strings.HasPrefix(ent.Name(), ".") && !before[ent.Name()] {
				return true, ""
			}
		}
		return false, "none yet"
	})
	late.Process.Signal(syscall.SIGKILL)
	late.Wait()
	for id := range e.sandboxDirs() {
		seen[id] = true
	}
	e.must("prune")
	for _, id := range strings.Fields(e.must("ps", "-a", "-q")) {
		e.must("rm", "-f", id)
	}
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("prune and rm -f left sandboxes: %s", out)
	}
	fixtures.Eventually(t, "nothing left on the host after prune", func() (bool, string) {
		left := e.leftovers(seen)
		return len(left) == 0, strings.Join(left, "\n")
	})
	for _, dir := range []string{"c", "c/.pool"} {
		ents, _ := os.ReadDir(filepath.Join(e.root, dir))
		for _, ent := range ents {
			if !strings.HasPrefix(ent.Name(), ".") {
				t.Errorf("state left: %s/%s", dir, ent.Name())
			}
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "oci", "index.json")); err != nil {
		t.Errorf("the store is damaged: %v", err)
	}
	e.must("run", "--rm", e.ref, "true") // and it still works
}

// 50 loops in separate processes spawn, exec and remove sandboxes on one
// state root at once: no state is corrupted and no output is lost (each
// command prints numbered lines; all arrive, in order).
func TestConcurrentProcessesOnOneRoot(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	const loops, rounds, lines = 50, 2, 300
	want := ""
	for i := 1; i <= lines; i++ {
		want += strconv.Itoa(i) + "\n"
	}
	var wg sync.WaitGroup
	errs := make(chan string, loops*rounds)
	for l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				name := fmt.Sprintf("loop%d-%d", l, r)
				steps := [][]string{
					{"run", "-d", "--name", name, e.ref, "sleep", "1000"},
					{"exec", name, "seq", strconv.Itoa(lines)},
					{"rm", "-f", name},
				}
				for _, args := range steps {
					cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
					out, err := cmd.Output()
					if err != nil {
						var stderr []byte
						if ee, ok := err.(*exec.ExitError); ok {
							stderr = ee.Stderr
						}
						errs <- fmt.Sprintf("%v: %v (%s) stderr: %s\n%s", args, err, out, stderr, e.evidence(name))
						break
					}
					if args[0] == "exec" && string(out) != want {
						errs <- fmt.Sprintf("%v: got %d bytes, not the %d numbered lines in order", args, len(out), lines)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 5 {
		t.Errorf("... and %d more", n-5)
	}
	if out := e.must("ps", "-a"); strings.Contains(out, "Broken") || strings.Count(out, "\n") != 1 {
		t.Errorf("after the loops:\n%s", out)
	}
}

// --read-only, --tmpfs /tmp:size= and --storage-opt size= as docker users
// write them; what cannot be honoured is refused with a clear message (a
// tmpfs goes at any absolute path but /, as Docker's).
func TestReadOnlyAndSizeFlags(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	out, code := e.run("", "run", "--rm", "--read-only", "--tmpfs", "/tmp:rw,size=2m", e.ref, "sh", "-c",
		"touch /x 2>&1; dd if=/dev/zero of=/tmp/f bs=1M count=8 2>&1 | grep -c 'No space'; df -k /tmp | tail -1")
	if code != 0 || !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "\n1\n") || !strings.Contains(out, " 2048 ") {
		t.Errorf("--read-only --tmpfs: exit %d\n%s", code, out)
	}
	out, code = e.run("", "run", "--rm", "--storage-opt", "size=4m", e.ref, "sh", "-c", "dd if=/dev/zero of=/f bs=1M count=8 2>&1 | grep -c 'No space'")
	if code != 0 || strings.TrimSpace(out) != "1" {
		t.Errorf("--storage-opt size=4m: exit %d %q", code, out)
	}
	for _, args := range [][]string{{"--tmpfs", "run"}, {"--tmpfs", "/"}, {"--tmpfs", "/tmp:size=lots"}, {"--storage-opt", "dm.basesize=1g"}} {
		out, code := e.run("", append(append([]string{"run", "--rm"}, args...), e.ref, "true")...)
		if code != 125 || !strings.Contains(out, args[0]) {
			t.Errorf("%v: exit %d %q, want 125 naming the flag", args, code, out)
		}
	}
}

// Weakening flags are refused by default, naming what to allow; allowed,
// they show in inspect.
func TestWeakeningFlags(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	for _, args := range [][]string{{"--cap-add", "SYS_ADMIN"}, {"--cap-add=ALL"}, {"--security-opt", "seccomp=unconfined"}, {"--security-opt", "seccomp:unconfined"},
		{"-v", "/:/h"}, {"-v=/:/h"}, {"-v/:/h"}, {"--volume=/etc:/e"}, {"--volume", "/proc/1:/p"}, {"-v", "/dev/null:/n"}, {"-v", "/boot:/b:ro"}} {
		out, code := e.run("", append(append([]string{"run", "--rm"}, args...), e.ref, "true")...)
		if code != 125 || !strings.Contains(out, "--allow-unsafe") {
			t.Errorf("%v: exit %d %q, want 125 naming --allow-unsafe", args, code, out)
		}
	}
	// What nothing can allow: refused naming the policy, in every spelling.
	for _, args := range [][]string{{"--privileged"}, {"--pid=host"}, {"--pid", "host"}, {"--ipc=host"}, {"--uts", "host"}, {"--userns=host"}, {"--device", "/dev/kvm"}} {
		out, code := e.run("", append(append([]string{"run", "--rm"}, args...), e.ref, "true")...)
		if code != 125 || !strings.Contains(out, "refused by the sandbox policy") {
			t.Errorf("%v: exit %d %q, want 125 naming the policy", args, code, out)
		}
	}
	if out, code := e.run("", "run", "--rm", "-v", "/etc:/e:ro", "--allow-unsafe", "mount=/etc", e.ref, "test", "-e", "/e/passwd"); code != 0 {
		t.Errorf("an allowed mount of /etc: exit %d %q", code, out)
	}
	e.must("run", "-d", "--name", "weak", "--cap-add", "SYS_ADMIN", "--allow-unsafe", "cap-add=SYS_ADMIN", "--cap-drop", "NET_RAW", e.ref, "sleep", "100")
	out := e.must("inspect", "weak")
	if !strings.Contains(out, `"SYS_ADMIN"`) || !strings.Contains(out, `"NET_RAW"`) || !strings.Contains(out, `"seccomp=default"`) {
		t.Errorf("inspect:\n%s", out)
	}
	e.must("rm", "-f", "weak")
}

// doctor: every check passes or warns on a host that runs the tests (as
// root and rootless), each warning has a remedy, --json works, and a
// failing check exits 1.
func TestDoctor(t *testing.T) {
	e := newEnv(t)
	out, code := e.run("", "doctor", "--json")
	if code != 0 {
		t.Fatalf("doctor: exit %d\n%s", code, out)
	}
	var checks []struct{ Name, Status, Detail, Remedy string }
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	names := map[string]string{}
	for _, c := range checks {
		names[c.Name] = c.Status
		if c.Status == "warn" && c.Remedy == "" {
			t.Errorf("%s warns without a remedy: %s", c.Name, c.Detail)
		}
	}
	for _, n := range []string{"kernel", "user namespaces", "subordinate ids", "overlayfs in a user namespace", "seccomp", "cgroups", "store", "network helper"} {
		if s := names[n]; s != "pass" && s != "warn" {
			t.Errorf("check %q: %q", n, s)
		}
	}
	if os.Geteuid() == 0 && names["cgroups"] != "pass" {
		t.Errorf("as root the cgroup check must pass: %v", names)
	}
	out, code = e.runRoot("/proc/no-store-here", "doctor")
	if code != 1 || !strings.Contains(out, "fail") || !strings.Contains(out, "store") {
		t.Errorf("doctor with an unusable store: exit %d\n%s", code, out)
	}
}

// runRoot is run with another --root.
func (e *env) runRoot(root string, args ...string) (string, int) {
	cmd := exec.Command(e.bin, append([]string{"--root", root}, args...)...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	return string(out), 0
}

// The mount policy judges where a bind leads, not how it is spelled: a
// symlink to /etc, /proc or / is refused as the directory itself is, and
// as root nothing hands a host system directory over to a sandbox's user
// (:U, or as the workspace). Nothing is left behind by a refusal.
func TestPolicyFollowsSymlinks(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	for _, target := range []string{"/etc", "/proc", "/"} {
		link := filepath.Join(dir, "to"+strings.ReplaceAll(target, "/", "-"))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		out, code := e.run("", "run", "--rm", "-v", link+":/h", e.ref, "true")
		if code != 125 || !strings.Contains(out, "through the symlink "+link) || !strings.Contains(out, "--allow-unsafe") {
			t.Errorf("-v %s (-> %s): exit %d %q, want 125 naming the symlink", link, target, code, out)
		}
	}
	if os.Geteuid() == 0 {
		rootLink := filepath.Join(dir, "to-")
		for _, args := range [][]string{
			{"-v", "/usr:/x:U"}, {"-v", "/var/lib:/x:U"}, {"-v", "/usr/share:/x:U"}, {"-v", rootLink + ":/x:U"},
			{"--workspace", "/usr/share"}, {"--workspace", "/var"},
		} {
			out, code := e.run("", append(append([]string{"run", "--rm"}, args...), e.ref, "true")...)
			if code != 125 || (!strings.Contains(out, "system files") && !strings.Contains(out, "--allow-unsafe")) {
				t.Errorf("%v: exit %d %q, want 125", args, code, out)
			}
		}
		// The owner of what was refused is unchanged.
		if fi, err := os.Stat("/usr/share"); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("/usr/share: %v %v", fi, err)
		}
	}
	if left, _ := e.run("", "ps", "-a", "-q"); strings.TrimSpace(left) != "" {
		t.Errorf("a refusal left sandboxes: %s", left)
	}
	if l := e.leftovers(e.sandboxDirs()); len(l) != 0 {
		t.Errorf("a refusal left: %v", l)
	}
}

// TestDoctorTunMode: where /dev/net/tun is mode 0600 (as on these
// machines before scripts/test.sh sets it 0666), doctor run by an
// unprivileged user warns that the network helper cannot open it and
// says how to fix it. Root only: it replaces /dev/net/tun, in a mount
// namespace of its own, with a 0600 node, then runs doctor as the test
// user (scripts/deps.sh creates it) inside that namespace.
func TestDoctorTunMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test replaces /dev/net/tun in a mount namespace: run it as root (scripts/test.sh does)")
	}
	user := os.Getenv("SLOPBOX_TEST_USER")
	if user == "" {
		user = "slopbox-test"
	}
	if _, err := exec.LookPath("slirp4netns"); err != nil {
		t.Fatal("slirp4netns (scripts/deps.sh) is needed")
	}
	dir := searchable(t, t.TempDir())
	bin := filepath.Join(dir, "slopbox")
	if b, err := os.ReadFile(slopboxBin(t)); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying slopbox for %s: %v", user, err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil || os.Chmod(root, 0o777) != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`set -e
mknod -m 0600 %[1]s/tun c 10 200
mount --bind %[1]s/tun /dev/net/tun
exec su %[2]s -s /bin/sh -c 'HOME=%[1]s %[3]s --root %[4]s doctor --json'`, dir, user, bin, root)
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("doctor as %s with /dev/net/tun 0600: %v\n%s", user, err, out)
	}
	var checks []struct{ Name, Status, Detail, Remedy string }
	if err := json.Unmarshal(out, &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, c := range checks {
		if c.Name == "network helper" {
			if c.Status != "warn" || !strings.Contains(c.Detail, "/dev/net/tun is mode 0600") || !strings.Contains(c.Remedy, "chmod 0666 /dev/net/tun") {
				t.Errorf("network helper with /dev/net/tun 0600: %+v", c)
			}
			return
		}
	}
	t.Errorf("doctor has no network helper check:\n%s", out)
}
