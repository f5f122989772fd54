package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRuntimeTools runs the OCI runtime-spec's own conformance suite,
// opencontainers/runtime-tools' validation binaries (built from the
// module test/runtimetools pins), with RUNTIME set to slopbox-runc. Every
// slopbox failure must be listed, with its reason, in
// test/runtimetools/known-failures.txt: an unlisted one fails the test.
// With SLOPBOX_RUNTIMETOOLS_PEERS=runc,crun (make bench sets it) the same
// suite then runs against those runtimes on the same machine in the same
// run, for the comparison docs/oci-runtime.md quotes; make test leaves
// them out: they test runc and crun, not slopbox (three minutes here),
// and some of their bundles change the host's /dev. The counts go to
// .work/runtime-tools/summary.md (and the log). Root only: the suite's
// bundles run as root and it creates cgroups at fixed paths.
func TestRuntimeTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("runtime-tools' validation runs as root (scripts/test.sh runs it in the root pass)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building runtime-tools needs the go command: %v", err)
	}
	mod, _ := filepath.Abs("../runtimetools")
	suite := buildRuntimeTools(t, gobin, mod)

	known := readKnownFailures(t, filepath.Join(mod, "known-failures.txt"))
	link := filepath.Join(t.TempDir(), "slopbox-runc")
	if err := os.Symlink(slopboxBin(t), link); err != nil {
		t.Fatal(err)
	}
	// crun 1.8 refuses a hybrid host whose cgroup2 hierarchy has a
	// controller ("cgroups in hybrid mode not supported"), as this one
	// has (hugetlb): it runs in a mount namespace of its own where that
	// hierarchy is unmounted, which changes nothing for the host or for
	// the tests running beside this one.
	hybrid := false
	if b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil && len(bytes.TrimSpace(b)) > 0 {
		hybrid = true
	}
	type runtime struct {
		name, bin   string
		hideUnified bool
	}
	runtimes := []runtime{{"slopbox-runc", link, false}}
	for _, peer := range strings.FieldsFunc(os.Getenv("SLOPBOX_RUNTIMETOOLS_PEERS"), func(r rune) bool { return r == ',' || r == ' ' }) {
		switch peer {
		case "runc":
			runtimes = append(runtimes, runtime{"runc", "runc", false})
		case "crun":
			runtimes = append(runtimes, runtime{"crun", "crun", hybrid})
		default:
			t.Fatalf("SLOPBOX_RUNTIMETOOLS_PEERS: unknown runtime %q (runc, crun)", peer)
		}
	}
	var rows []string
	var slopboxFailures []string
	for _, rt := range runtimes {
		bin, err := exec.LookPath(rt.bin)
		if err != nil {
			t.Fatalf("%s is needed to compare against (scripts/deps.sh installs it): %v", rt.name, err)
		}
		res := runValidation(t, suite, rt.name, bin, rt.hideUnified)
		restoreDevNull(t, rt.name)
		rows = append(rows, fmt.Sprintf("| %s | %d of %d | %d | %d | %d | %.0f s |", rt.name, res.binaries-res.binariesFailed, res.binaries, res.ok, res.notOK, res.skip, res.took.Seconds()))
		t.Logf("%s: %d ok, %d not ok, %d skipped in %s", rt.name, res.ok, res.notOK, res.skip, res.took.Round(time.Second))
		if rt.name != "slopbox-runc" {
			continue
		}
		// A container left in slopbox's state is its defect. Mounts
		// and cgroups are the suite's: bundles without a mount
		// namespace mount into the host's, and relative cgroup paths
		// leave their parents (runc leaves the same); they were
		// removed, and are logged.
		for _, l := range res.leftovers {
			if strings.HasPrefix(l, "container ") {
				t.Errorf("slopbox-runc left behind: %s", l)
			}
		}
		seen := map[string]bool{}
		for _, f := range res.failures {
			seen[f] = true
			if _, ok := known[f]; !ok {
				t.Errorf("new runtime-tools failure (fix it, or list it with its reason in test/runtimetools/known-failures.txt):\n  %s", f)
			}
			slopboxFailures = append(slopboxFailures, fmt.Sprintf("- `%s`: %s", f, known[f]))
		}
		for f := range known {
			if !seen[f] {
				t.Logf("known failure no longer fails (remove it from known-failures.txt): %s", f)
			}
		}
	}

	summary := "| runtime | binaries passed | ok | not ok | skipped | time |\n|---|---|---|---|---|---|\n" +
		strings.Join(rows, "\n") + "\n\nslopbox-runc's failures and their reasons:\n\n" + strings.Join(slopboxFailures, "\n") + "\n"
	t.Logf("runtime-tools v0.9.0 validation, this run:\n%s", summary)
	if dir, err := filepath.Abs("../../.work/runtime-tools"); err == nil && os.MkdirAll(dir, 0o755) == nil {
		os.WriteFile(filepath.Join(dir, "summary.md"), []byte(summary), 0o644)
	}
}

// buildRuntimeTools builds runtimetest and every validation binary into a
// directory that also holds the rootfs tarball the binaries unpack from
// their working directory.
func buildRuntimeTools(t *testing.T, gobin, mod string) string {
	dir := t.TempDir()
	list := exec.Command(gobin, "list", "github.com/opencontainers/runtime-tools/validation/...")
	list.Dir = mod
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list of runtime-tools' validation: %v", err)
	}
	pkgs := []string{"github.com/opencontainers/runtime-tools/cmd/runtimetest"}
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasSuffix(p, "/validation/util") {
			pkgs = append(pkgs, p)
		}
	}
	build := exec.Command(gobin, append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building runtime-tools: %v\n%s", err, out)
	}
	where := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", "github.com/opencontainers/runtime-tools")
	where.Dir = mod
	src, err := where.Output()
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(src)), "rootfs-amd64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs-amd64.tar.gz"), tarball, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readKnownFailures reads "binary: assertion  # reason" lines.
func readKnownFailures(t *testing.T, path string) map[string]string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]string{}
	var reason []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			reason = nil
		case strings.HasPrefix(line, "#"):
			reason = append(reason, strings.TrimSpace(strings.TrimPrefix(line, "#")))
		default:
			if len(reason) == 0 {
				t.Fatalf("%s: %q has no reason (a # comment above it)", path, line)
			}
			known[line] = strings.Join(reason, " ")
		}
	}
	return known
}

type validationResult struct {
	ok, notOK, skip          int
	binaries, binariesFailed int
	failures                 []string // "binary: assertion"
	leftovers                []string
	took                     time.Duration
}

var tapLine = regexp.MustCompile(`^(not )?ok \d+(?: - )?(.*)$`)

// runValidation runs every validation binary in suite against one
// runtime, through a wrapper that gives it a state root of its own, and
// then removes whatever the run left: containers, mounts under its
// TMPDIR, the suite's cgroups.
func runValidation(t *testing.T, suite, name, bin string, hideUnified bool) validationResult {
	work := t.TempDir()
	tmp := filepath.Join(work, "tmp")
	state := filepath.Join(work, "state")
	wrapper := filepath.Join(work, name)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %q --root %q \"$@\"\n", bin, state)
	if hideUnified {
		script = fmt.Sprintf("#!/bin/sh\nexec unshare -m --propagation private sh -c 'umount -l /sys/fs/cgroup/unified && exec %q --root %q \"$@\"' %s \"$@\"\n", bin, state, name)
	}
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(suite)
	if err != nil {
		t.Fatal(err)
	}
	var res validationResult
	start := time.Now()
	// The output stays for reading after the run (the README's reasons
	// come from it).
	logs, _ := filepath.Abs("../../.work/runtime-tools")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(logs, name+".tap"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	for _, e := range entries {
		test := e.Name()
		if test == "runtimetest" || strings.HasSuffix(test, ".tar.gz") {
			continue
		}
		out, code := runBounded(filepath.Join(suite, test), suite, "RUNTIME="+wrapper, "TMPDIR="+tmp)
		fmt.Fprintf(logf, "== %s (exit %d)\n%s\n", test, code, out)
		failed := false
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			m := tapLine.FindStringSubmatch(sc.Text())
			switch {
			case m == nil:
			case strings.Contains(strings.ToLower(m[2]), "# skip"):
				res.skip++
			case m[1] == "":
				res.ok++
			default:
				res.notOK++
				failed = true
				res.failures = append(res.failures, test+": "+strings.TrimSpace(m[2]))
			}
		}
		res.binaries++
		if code != 0 && !failed {
			// It ended without saying what failed (util.Fatal, a
			// timeout): the binary as a whole fails.
			res.notOK++
			res.failures = append(res.failures, fmt.Sprintf("%s: (exit %d)", test, code))
			failed = true
		}
		if failed {
			res.binariesFailed++
		}
	}
	res.took = time.Since(start)
	t.Logf("%s: the suite's output is in %s", name, logf.Name())
	res.leftovers = cleanValidation(wrapper, state, tmp)
	if len(res.leftovers) > 0 {
		t.Logf("%s's run left (removed now):\n  %s", name, strings.Join(res.leftovers, "\n  "))
	}
	sort.Strings(res.failures)
	os.WriteFile(filepath.Join(logs, name+".failures"), []byte(strings.Join(res.failures, "\n")+"\n"), 0o644)
	return res
}

// runBounded runs one validation binary for at most two minutes; on a
// timeout its whole process group is killed.
func runBounded(bin, dir string, env ...string) ([]byte, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return []byte(err.Error()), -1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return out.Bytes(), ee.ExitCode()
		}
		return out.Bytes(), 0
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return append(out.Bytes(), "\n(timed out after 2 minutes)\n"...), -1
	}
}

// cleanValidation deletes the containers left in state, unmounts what
// is mounted under tmp and removes the suite's cgroups, and says what it
// found.
func cleanValidation(wrapper, state, tmp string) []string {
	var left []string
	ids, _ := os.ReadDir(state)
	for _, id := range ids {
		if !id.IsDir() {
			continue
		}
		left = append(left, "container "+id.Name())
		exec.Command(wrapper, "delete", "--force", id.Name()).Run()
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], tmp+"/") {
				mounts = append(mounts, f[4])
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
		for _, m := range mounts {
			left = append(left, "mount "+m)
			unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/cgrouptest", "/sys/fs/cgroup/*/testdir"} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			left = append(left, "cgroup "+d)
			removeCgroupTree(d)
		}
	}
	return left
}

// removeCgroupTree removes a cgroup directory and its children, deepest
// first (a cgroup's files cannot be removed, only its directory).
func removeCgroupTree(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
}

// restoreDevNull puts the host's /dev/null back as it must be (character
// device 1:3, root's, mode 0666) if a validation run changed it, and says
// which runtime's run did. Some of the suite's bundles have no mount
// namespace and work on the host's /dev: on this machine /dev/null was
// seen deleted (then recreated as a regular file by the next write) and
// chowned to uid 1000 while the suite ran, which breaks everything after
// it on the host.
func restoreDevNull(t *testing.T, runtime string) {
	t.Helper()
	var st unix.Stat_t
	err := unix.Lstat("/dev/null", &st)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(1, 3) && st.Uid == 0 && st.Gid == 0 && st.Mode&0o777 == 0o666 {
		return
	}
	t.Logf("%s's validation run changed the host's /dev/null (%v, mode %#o, owner %d:%d, rdev %#x): restored", runtime, err, st.Mode, st.Uid, st.Gid, st.Rdev)
	os.Remove("/dev/null")
	if err := unix.Mknod("/dev/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Errorf("restore /dev/null: %v", err)
	}
	os.Chmod("/dev/null", 0o666)
	os.Chown("/dev/null", 0, 0)
}
