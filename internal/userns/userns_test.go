package userns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestNestedMapsAndShiftAgree(t *testing.T) {
	n, err := ParseNested("u1000-g100")
	if err != nil {
		t.Fatal(err)
	}
	// Inside the nested namespace, container id c is outer id ToHost(c);
	// a file the sandbox must see as c is stored as Shift(c).
	for _, c := range []int{0, 1, 99, 100, 101, 999, 1000, 1001, 65535} {
		outU, ok := ToHost(n.UIDs, uint32(c))
		if !ok {
			t.Fatalf("uid %d unmapped", c)
		}
		if su, _ := n.Shift(c, 0); uint32(su) != outU {
			t.Errorf("uid %d: map says outer %d, shift stores %d", c, outU, su)
		}
		outG, _ := ToHost(n.GIDs, uint32(c))
		if _, sg := n.Shift(0, c); uint32(sg) != outG {
			t.Errorf("gid %d: map says outer %d, shift stores %d", c, outG, sg)
		}
	}
	if u, _ := ToHost(n.UIDs, 1000); u != 0 {
		t.Errorf("the sandbox user is outer %d, want 0 (the invoking user)", u)
	}
	var total uint32
	for _, m := range n.UIDs {
		total += m.Size
	}
	if total != DefaultSize {
		t.Errorf("nested map covers %d ids, want %d", total, DefaultSize)
	}
	if _, err := ParseNested("bogus"); err == nil {
		t.Error("a bad key parsed")
	}
}

// The main goroutine keeps the main thread: the parent death signal a
// report reads is the main thread's.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	Init()
	if os.Getenv("_USERNS_TEST_REPORT") != "" {
		// A re-executed copy of this binary (TestStageOneHandOver).
		// fd 3 may be open again, for the Go runtime's own use.
		l, _ := os.Readlink("/proc/self/fd/3")
		l4, _ := os.Readlink("/proc/self/fd/4") // before anything opens a file
		fmt.Printf("inside=%v stage=%q sync pipe open=%v\n", Inside(), os.Getenv(stageEnv), strings.HasPrefix(l, "pipe:"))
		if os.Getenv("_USERNS_TEST_REPORT") == "maps" {
			// fd 3 was closed at the exec (the runtime may have opened a
			// file of its own there since: not the pipe, above).
			fmt.Printf("fd4=%q\n", l4)
			// The name of the program last exec'd: a stage-2 exec is of
			// /proc/self/exe.
			comm, _ := os.ReadFile("/proc/self/comm")
			fmt.Printf("comm=%s\n", strings.TrimSpace(string(comm)))
			var pdeath int32
			unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&pdeath)), 0, 0, 0)
			fmt.Printf("pdeathsig=%d\n", pdeath)
			for _, f := range []string{"uid_map", "gid_map", "setgroups"} {
				b, _ := os.ReadFile("/proc/self/" + f)
				fmt.Printf("%s=%s\n", f, strings.Join(strings.Fields(string(b)), " "))
			}
			status, _ := os.ReadFile("/proc/self/status")
			for _, l := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(l, "CapEff:") {
					fmt.Println(strings.Join(strings.Fields(l), " "))
				}
			}
			fmt.Printf("uid=%d\n", os.Getuid())
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Stage 1 (stage1.c with cgo, else Init) waits for the byte that says the
// maps are written, then execs this binary again as stage 2 with the sync
// pipe closed; a pipe closed without that byte aborts with exit 125.
func TestStageOneHandOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		send bool
	}{{"maps written", true}, {"aborted", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/proc/self/exe", "-test.run=^$")
			// Each Go runtime start traces its package inits: with cgo,
			// stage 1 (stage1.c) starts none.
			cmd.Env = append(os.Environ(), stageEnv+"=1", "_USERNS_TEST_REPORT=1", "GODEBUG=inittrace=1")
			cmd.ExtraFiles = []*os.File{r}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r.Close()
			if tc.send {
				if _, err := w.Write([]byte{1}); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			err = cmd.Wait()
			if tc.send {
				if err != nil || stdout.String() != "inside=true stage=\"\" sync pipe open=false\n" {
					t.Fatalf("stage 2: %v, stdout %q, stderr %q; want inside, stage unset, fd 3 closed", err, stdout.String(), stderr.String())
				}
				want := 2 // stage 1 in Go, then stage 2
				if cgoStageOne {
					want = 1
				}
				if got := strings.Count(stderr.String(), "init runtime @"); got != want {
					t.Fatalf("%d Go runtime starts, want %d (cgo %v); stderr:\n%s", got, want, cgoStageOne, stderr.String())
				}
				return
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(stderr.String(), "user namespace set-up was aborted") {
				t.Fatalf("aborted stage 1: %v, stdout %q, stderr %q; want exit 125 and the reason", err, stdout.String(), stderr.String())
			}
		})
	}
}

// A mapping this process may write itself (root's range, or an
// unprivileged user's single self-mapping) is written by Go between the
// fork and the exec: the child execs once (its name is its program's, not
// /proc/self/exe's), already root of its namespace with every capability,
// with fd 3 closed and the caller's extra files in their places, without
// the fork's parent death signal, and an unprivileged one has setgroups
// denied.
func TestStartWritesMapsBeforeExec(t *testing.T) {
	m := Mapping{UIDs: []IDMap{{0, uint32(os.Geteuid()), 1}}, GIDs: []IDMap{{0, uint32(os.Getegid()), 1}}}
	setgroups := "deny"
	if os.Geteuid() == 0 {
		m = Mapping{UIDs: []IDMap{{0, DefaultRootBase, DefaultSize}}, GIDs: []IDMap{{0, DefaultRootBase + 7, DefaultSize}}}
		setgroups = "allow"
	}
	extra, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	// A copy of this binary by a name of its own (a stage-2 exec would
	// show as /proc/self/exe's), where the namespace's root, an id of the
	// subordinate range as root, may exec it.
	dir, err := os.MkdirTemp("", "userns-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self := filepath.Join(dir, "userns-helper")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(self, "/proc/self/exe"); err != nil {
		t.Fatal(err)
	}
	cmd := CommandPath(self, []string{"-test.run=^$"})
	cmd.Env = append(cmd.Env, "_USERNS_TEST_REPORT=maps", "GODEBUG=inittrace=1")
	cmd.ExtraFiles = []*os.File{extra}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := Start(cmd, m); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v; stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		t.Fatal(err)
	}
	comm := filepath.Base(self)
	if len(comm) > 15 {
		comm = comm[:15] // TASK_COMM_LEN
	}
	// The fork's parent death signal (Command sets SIGKILL) is cleared at
	// stage 2: a helper outlives its host, as after a stage-2 exec.
	want := fmt.Sprintf("inside=true stage=\"\" sync pipe open=false\nfd4=\"/dev/null\"\ncomm=%s\npdeathsig=0\nuid_map=%s\ngid_map=%s\nsetgroups=%s\nCapEff: %016x\nuid=0\n",
		comm, strings.TrimSpace(format(m.UIDs, " ")), strings.TrimSpace(format(m.GIDs, " ")), setgroups, uint64(1)<<(n+1)-1)
	if got := stdout.String(); got != want {
		t.Errorf("child reported\n%s\nwant\n%s", got, want)
	}
	if got := strings.Count(stderr.String(), "init runtime @"); got != 1 {
		t.Errorf("%d Go runtime starts, want 1 (no stage-1 exec); stderr:\n%s", got, stderr.String())
	}
}

// The range suggested to a user without one overlaps no range of
// /etc/subuid or /etc/subgid (doctor used to propose 100000-165535, the
// range useradd gives the first user).
func TestFreeRange(t *testing.T) {
	dir := t.TempDir()
	uid, gid := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	os.WriteFile(uid, []byte("alice:100000:65536\nroot:1000000000:65536\n# comment\nbad line\n"), 0o644)
	os.WriteFile(gid, []byte("alice:100000:65536\nbob:165536:70000\n"), 0o644)
	if got := freeRange(65536, uid, gid); got != 235536 {
		t.Errorf("freeRange = %d, want 235536 (after bob's gids)", got)
	}
	if got := freeRange(65536, filepath.Join(dir, "none")); got != 100000 {
		t.Errorf("freeRange with no files = %d, want 100000", got)
	}
	os.WriteFile(uid, []byte("carol:300000:65536\n"), 0o644)
	if got := freeRange(65536, uid); got != 100000 {
		t.Errorf("freeRange below a range = %d, want 100000", got)
	}
	// This host's files: the suggestion overlaps none of their entries.
	start := uint64(FreeRange(DefaultSize))
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			var name string
			var s, n uint64
			if _, err := fmt.Sscanf(strings.ReplaceAll(line, ":", " "), "%s %d %d", &name, &s, &n); err == nil && start < s+n && s < start+DefaultSize {
				t.Errorf("FreeRange() = %d overlaps %s's range %d:%d in %s", start, name, s, n, f)
			}
		}
	}
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
