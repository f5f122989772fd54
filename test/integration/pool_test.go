package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// keepers lists the pool keeper processes of state root root.
func keepers(root string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("\x00--root\x00"+root+"\x00")) && bytes.Contains(b, []byte("\x00pool\x00keeper")) {
			out = append(out, e.Name())
		}
	}
	return out
}

// poolIDs are the ids `pool ls` lists as ready (their 12-character form).
func poolIDs(e *env) []string {
	var ids []string
	for _, l := range strings.Split(e.must("pool", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasSuffix(l, "ready") {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// TestCLIPool (issue 45): the CLI's warm pool is off by default (no
// process is left by a run), pool keep starts one keeper that keeps the
// sandboxes of a kind started, a run --rm claims one and gets exactly
// what a cold start gives, concurrent runs claiming at once each get
// their own settings, ps does not show the pool but ps --pool does, the
// keeper's socket is its user's alone, and pool rm and prune stop it with
// nothing left behind.
// hostBaseless names the host side of a sandbox's id map BASE wherever
// it shows: as root every sandbox has a range of its own, so two
// sandboxes alike differ there and only there.
func hostBaseless(probe string) string {
	m := regexp.MustCompile(`(?m)^\s*0\s+([0-9]+)\s+[0-9]+$`).FindStringSubmatch(probe)
	if m == nil || m[1] == "0" {
		return probe
	}
	return regexp.MustCompile(`\b`+m[1]+`\b`).ReplaceAllString(probe, "BASE")
}

func TestCLIPool(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	t.Cleanup(func() {
		e.run("", "pool", "rm")
		waitFor(t, "the keeper to exit", func() bool { return len(keepers(e.root)) == 0 })
	})
	// The command that shows what a sandbox is: its privileges, ids,
	// mounts and files (not its hostname, which is its own id).
	const probe = `grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; id; cat /proc/self/uid_map /proc/self/gid_map; ` +
		`awk '{print $2, $3, $4}' /proc/self/mounts | sed 's/,size=[0-9a-z]*//; s#/[0-9a-f]\{16\}/#/ID/#g'; ls -la / | awk '{print $1, $3, $4, $NF}'; cat /etc/hosts | grep -v "$(hostname)"`

	// Off by default: a run leaves no keeper, and makes no socket.
	cold := hostBaseless(e.must("run", "--rm", e.ref, "sh", "-c", probe))
	if k := keepers(e.root); len(k) > 0 {
		t.Fatalf("a run without pool keep left a keeper: %v", k)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "pool", "keeper.sock")); err == nil {
		t.Fatal("a run without pool keep made the keeper's socket")
	}

	e.must("pool", "keep", "--count", "2", e.ref)
	if k := keepers(e.root); len(k) != 1 {
		t.Fatalf("pool keep: keepers %v, want one", k)
	}
	// A second keep of the same root starts no second keeper.
	e.must("pool", "keep", "--count", "2", e.ref)
	if k := keepers(e.root); len(k) != 1 {
		t.Fatalf("a second pool keep: keepers %v, want one", k)
	}
	ready := poolIDs(e)
	if len(ready) != 2 {
		t.Fatalf("pool ls: %v, want 2 ready", ready)
	}
	if out := e.must("ps", "--pool"); !strings.Contains(out, ready[0]) {
		t.Errorf("ps --pool does not list %s: %s", ready[0], out)
	}
	if out := e.must("ps", "-a", "-q", "--no-trunc"); strings.TrimSpace(out) != "" {
		t.Errorf("ps -a lists the pool: %s", out)
	}
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(e.root, "pool"), 0o700}, {filepath.Join(e.root, "pool", "keeper.sock"), 0o700}} {
		if fi, err := os.Lstat(p.path); err != nil || fi.Mode().Perm()&^p.mode != 0 {
			t.Errorf("%s: %v %v, want no more than %v: the pool is its user's alone", p.path, fi.Mode(), err, p.mode)
		}
	}

	// A claimed sandbox is one of those kept (its hostname is its id's),
	// and it is what a cold one is.
	host := strings.TrimSpace(e.must("run", "--rm", e.ref, "hostname"))
	if !slices.ContainsFunc(ready, func(id string) bool { return host == "slopbox-"+id[:8] }) {
		t.Errorf("run --rm got %s, none of the kept %v", host, ready)
	}
	if warm := hostBaseless(e.must("run", "--rm", e.ref, "sh", "-c", probe)); warm != cold {
		t.Errorf("a claimed sandbox differs from a cold one:\ncold:\n%s\nclaimed:\n%s", cold, warm)
	}

	// Claimed at once, each gets its own settings: environment, hostname,
	// user (0 or 1000: another needs a nested mapping, started cold
	// anyway), working directory and mount.
	var wg sync.WaitGroup
	outs := make([]string, 4)
	codes := make([]int, 4)
	for i := range outs {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(fmt.Sprintf("file%d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], codes[i] = e.run("", "run", "--rm", "-e", fmt.Sprintf("V=v%d", i), "--hostname", fmt.Sprintf("h%d", i),
				"-u", fmt.Sprint(1000*(i%2)), "-w", "/tmp", "-v", dir+":/data:ro", e.ref,
				"sh", "-c", `echo $V $(hostname) $(id -u) $(pwd) $(cat /data/f)`)
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if want := fmt.Sprintf("v%d h%d %d /tmp file%d", i, i, 1000*(i%2), i); codes[i] != 0 || strings.TrimSpace(out) != want {
			t.Errorf("run %d: exit %d: %q, want %q", i, codes[i], out, want)
		}
	}
	// A run -d of the kind kept for run --rm starts cold; it runs.
	e.must("run", "-d", "--name", "pooled-d", e.ref, "sleep", "300")
	e.must("rm", "-f", "pooled-d")

	// pool rm: the keeper and every kept sandbox go.
	e.must("pool", "rm")
	waitFor(t, "the keeper to exit", func() bool { return len(keepers(e.root)) == 0 })
	waitFor(t, "the kept sandboxes to go", func() bool {
		ents, _ := os.ReadDir(filepath.Join(e.root, "c", ".pool"))
		return len(ents) == 0
	})
	if out := e.must("ps", "--pool"); strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("ps --pool after pool rm: %s", out)
	}
	// And prune stops one too.
	e.must("pool", "keep", "--count", "1", e.ref)
	e.must("prune")
	waitFor(t, "prune to stop the keeper", func() bool { return len(keepers(e.root)) == 0 })
}
