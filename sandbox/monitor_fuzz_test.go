package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/test/fixtures"

	"golang.org/x/sys/unix"
)

// buildMonitor compiles internal/spawnd/monitor.c into dir for a test,
// with AddressSanitizer and UndefinedBehaviorSanitizer (any report ends it
// with status 1) where the C compiler has them, and with defs (-DNAME=V,
// such as a smaller MAX_LOG). It returns "" when there is no C compiler.
func buildMonitor(t testing.TB, dir, name string, defs ...string) (path string, sanitized bool) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			return "", false
		}
	}
	src, err := filepath.Abs("internal/spawnd/monitor.c")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, name)
	base := append([]string{"-Wall", "-Werror", "-DSLOPBOX_MONITOR_MAIN"}, defs...)
	san := append([]string{"-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"}, base...)
	if out, err := exec.Command(cc, append(san, "-o", path, src)...).CombinedOutput(); err == nil {
		// A sanitized program that does not start (no shadow memory on
		// this kernel) is built without.
		runOut, err := exec.Command(path).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			return path, true
		}
		t.Logf("the sanitized monitor does not start here (%v): %s%s", err, out, runOut)
	}
	if out, err := exec.Command(cc, append(append([]string{"-O2"}, base...), "-o", path, src)...).CombinedOutput(); err != nil {
		t.Fatalf("build monitor.c: %v\n%s", err, out)
	}
	return path, false
}

// monitorRun is a monitor started by startMonitor, with a stand-in for the
// sandbox's PID 1 (agent) and the command's output pipes.
type monitorRun struct {
	t        testing.TB
	cmd      *exec.Cmd
	dir      string // the sandbox's state directory
	agent    *os.File
	out, err *os.File // the command's stdout and stderr
	stderr   bytes.Buffer
	done     chan struct{}
	waitErr  error
}

const monitorTestID = "0123456789abcdef"

// startMonitor starts the monitor bin on a new state directory under root
// (made with a state file), in mode ("pipes", "pipes+stdin", "tty"), with
// extra given as its fds from 7 on. exe is the program it execs at the
// end: "" for this binary (monitorMain records the exit).
func startMonitor(t testing.TB, bin, root, exe, mode string, extra ...*os.File) *monitorRun {
	t.Helper()
	r := &monitorRun{t: t, dir: filepath.Join(root, "c", monitorTestID), done: make(chan struct{})}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, stateFile), []byte(`{"id":"`+monitorTestID+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.agent = os.NewFile(uintptr(fds[0]), "agent")
	monEnd := os.NewFile(uintptr(fds[1]), "monitor-end")
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.out, r.err = outW, errW
	if exe == "" {
		exe = "/proc/self/exe"
	}
	self, err := os.OpenFile(exe, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, root, monitorTestID, mode)
	r.cmd.Args[0] = "slopbox-monitor"
	r.cmd.Env = append(os.Environ(), reexec.Env+"="+monitorHelper, "_SLOPBOX_MONITOR=1",
		"ASAN_OPTIONS=detect_leaks=0:abort_on_error=0", "UBSAN_OPTIONS=print_stacktrace=1")
	r.cmd.ExtraFiles = append([]*os.File{self, monEnd, outR, errR}, extra...)
	r.cmd.Stderr = &r.stderr
	err = r.cmd.Start()
	for _, f := range []*os.File{self, monEnd, outR, errR} {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() { r.waitErr = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
		r.agent.Close()
		r.out.Close()
		r.err.Close()
	})
	return r
}

// waitReady waits until the monitor forwards signals (monitor.ready).
func (r *monitorRun) waitReady() {
	r.t.Helper()
	for deadline := time.Now().Add(fixtures.Patience()); ; time.Sleep(2 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(r.dir, monitorReady)); err == nil && string(b) == fmt.Sprint(r.cmd.Process.Pid) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the monitor never said it was ready for signals; its stderr: %s", r.stderr.String())
		}
	}
}

// exit closes the command's output and reports its exit (wait status
// status) as PID 1 does, then waits for the monitor to end.
func (r *monitorRun) exit(status uint32) {
	r.t.Helper()
	r.out.Close()
	r.err.Close()
	reply := make([]byte, 8)
	binary.NativeEndian.PutUint32(reply, replyExited)
	binary.NativeEndian.PutUint32(reply[4:], status)
	if _, err := r.agent.Write(reply); err != nil {
		r.t.Fatal(err)
	}
	r.wait()
}

// wait waits for the monitor to end, successfully.
func (r *monitorRun) wait() {
	r.t.Helper()
	select {
	case <-r.done:
		if r.waitErr != nil {
			r.t.Fatalf("monitor: %v; its stderr:\n%s", r.waitErr, r.stderr.String())
		}
	case <-time.After(30 * time.Second):
		r.t.Fatalf("the monitor did not end after the command's exit; its stderr:\n%s", r.stderr.String())
	}
}

// logPieces reads the log the monitor wrote (the one before, then the
// current one) and checks every line is a json-file entry: a JSON object
// of exactly "log", "stream" and "time", of valid UTF-8 (invalid input as
// U+FFFD escapes), with at most one newline, at its end, and at most 16 Ki
// characters (one per byte of output at most). A file longer than maxSize
// must hold a single line (the one that did not fit).
func logPieces(t testing.TB, dir string, maxSize int) []logLine {
	t.Helper()
	var pieces []logLine
	for _, name := range []string{logFile + ".1", logFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("%s ends with a partial line: %q", name, b[max(0, len(b)-80):])
		}
		lines := bytes.SplitAfter(b, []byte{'\n'})
		lines = lines[:len(lines)-1]
		if len(b) > maxSize && len(lines) != 1 {
			t.Errorf("%s has %d bytes in %d lines, more than its bound %d", name, len(b), len(lines), maxSize)
		}
		for _, line := range lines {
			if !utf8.Valid(line) {
				t.Fatalf("%s: a line is not valid UTF-8: %q", name, line)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(line, &fields); err != nil || len(fields) != 3 || fields["log"] == nil || fields["stream"] == nil || fields["time"] == nil {
				t.Fatalf("%s: not a json-file line (%v): %q", name, err, line)
			}
			var l logLine
			if err := json.Unmarshal(line, &l); err != nil {
				t.Fatalf("%s: %v: %q", name, err, line)
			}
			if l.Stream != "stdout" && l.Stream != "stderr" {
				t.Fatalf("%s: a line of stream %q", name, l.Stream)
			}
			if l.Log == "" || strings.IndexByte(l.Log, '\n') < len(l.Log)-1 && strings.IndexByte(l.Log, '\n') >= 0 {
				t.Fatalf("%s: a piece %q: empty, or with a newline before its end", name, l.Log)
			}
			if n := utf8.RuneCountInString(l.Log); n > 16<<10 {
				t.Fatalf("%s: a piece of %d characters, more than 16 KiB of output", name, n)
			}
			if time.Since(l.Time) > time.Minute || time.Until(l.Time) > time.Minute {
				t.Fatalf("%s: a line's time is %v", name, l.Time)
			}
			pieces = append(pieces, l)
		}
	}
	return pieces
}

// jsonText is what Go's json-file driver keeps of output b: b as a string
// through encoding/json, each byte of invalid UTF-8 as U+FFFD.
func jsonText(t testing.TB, b []byte) string {
	enc, err := json.Marshal(string(b))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(enc, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// An output chunk of FuzzMonitorLog: written to stdout or stderr, and
// with sync, read by the monitor before the next is written (a read of
// the monitor ends there).
type outChunk struct {
	stderr, sync bool
	data         []byte
}

// parseChunks makes the chunks of a fuzz input: a header byte (bit 0:
// stderr, bit 1: sync, bits 2-7: a length n), then n bytes of output; n
// = 0 repeats a pattern instead: a byte k (pattern length k&15+1), a byte
// c (count (c+1)*64), then the pattern. At most 1 MiB of output in all.
func parseChunks(data []byte) []outChunk {
	var chunks []outChunk
	total := 0
	for len(data) > 0 && total < 1<<20 {
		h := data[0]
		data = data[1:]
		c := outChunk{stderr: h&1 != 0, sync: h&2 != 0}
		if n := int(h >> 2); n > 0 {
			n = min(n, len(data))
			c.data, data = data[:n], data[n:]
		} else {
			if len(data) < 2 {
				break
			}
			k, count := int(data[0]&15)+1, (int(data[1])+1)*64
			data = data[2:]
			k = min(k, len(data))
			c.data, data = bytes.Repeat(data[:k], count), data[k:]
			if len(c.data) > 1<<20-total {
				c.data = c.data[:1<<20-total]
			}
		}
		total += len(c.data)
		chunks = append(chunks, c)
	}
	return chunks
}

// encodeChunks is parseChunks' inverse, for seeds: literal chunks of up
// to 63 bytes (sync on the last one only).
func encodeChunks(chunks ...outChunk) []byte {
	var b []byte
	for _, c := range chunks {
		for i := 0; i < len(c.data) || i == 0; i += 63 {
			piece := c.data[i:min(len(c.data), i+63)]
			h := byte(len(piece)) << 2
			if c.stderr {
				h |= 1
			}
			if c.sync && i+63 >= len(c.data) {
				h |= 2
			}
			if len(piece) == 0 {
				break
			}
			b = append(append(b, h), piece...)
		}
	}
	return b
}

// repeatChunk encodes output of pattern repeated (count+1)*64 times.
func repeatChunk(stderr, sync bool, pattern string, count byte) []byte {
	h := byte(0)
	if stderr {
		h |= 1
	}
	if sync {
		h |= 2
	}
	return append([]byte{h, byte(len(pattern) - 1), count}, pattern...)
}

// writeSynced writes b to w and, with sync, waits until the monitor has
// read all of it.
func writeSynced(t testing.TB, w *os.File, b []byte, sync bool) {
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if !sync {
		return
	}
	for deadline := time.Now().Add(fixtures.Patience()); ; time.Sleep(50 * time.Microsecond) {
		n, err := unix.IoctlGetInt(int(w.Fd()), unix.TIOCINQ) // FIONREAD: bytes in the pipe
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the monitor does not read its pipes")
		}
	}
}

// fastTempDir is a temporary directory in memory (/dev/shm) where there
// is one: a rotation empties the log before, which on a disk mounted with
// discard takes a good part of FuzzMonitorLog's time.
func fastTempDir(t *testing.T) string {
	if d, err := os.MkdirTemp("/dev/shm", "slopbox-fuzz-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

// smallLog is the log bound of FuzzMonitorLog's second build, small
// enough that its inputs rotate the log.
const smallLog = 4096

// FuzzMonitorLog feeds arbitrary output, in arbitrary chunks over stdout
// and stderr, through a build of the real monitor (sanitized where the C
// compiler can) and checks the log it writes: every line a json-file
// entry (logPieces), and the text of each stream, piece after piece, what
// Go's json-file encoding of the same bytes holds (jsonText). The first
// byte's bit 0 picks the build with a log bound of smallLog bytes instead
// of 8 MiB: what it keeps of each stream is then the end of that.
func FuzzMonitorLog(f *testing.F) {
	f.Add(append([]byte{0}, encodeChunks(outChunk{data: []byte("hello\n")}, outChunk{stderr: true, data: []byte("to stderr\n")})...))
	f.Add(append([]byte{0}, encodeChunks(outChunk{data: []byte("q\"b\\c\x01\t\x7f\r\b\f\u2028<>&\n")}, outChunk{data: []byte("bad \xff\xfe \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 é €\n")})...))
	// A character across two reads: the pieces hold it whole.
	f.Add(append([]byte{0}, encodeChunks(outChunk{data: []byte("ab\xc3"), sync: true}, outChunk{data: []byte("\xa9\n")}, outChunk{data: []byte("\xf0\x9f"), sync: true}, outChunk{data: []byte("\x98"), sync: true}, outChunk{data: []byte("\x80")})...))
	// Invalid bytes at a read's end, a truncated character at the end.
	f.Add(append([]byte{0}, encodeChunks(outChunk{data: []byte("\xe2\x82"), sync: true}, outChunk{data: []byte("x\xe2"), sync: true}, outChunk{data: []byte("\x82\xac\xf0")})...))
	// A line longer than 16 KiB with a character across 16384.
	f.Add(append(append([]byte{0}, repeatChunk(false, false, "x", 254)...), encodeChunks(outChunk{data: []byte("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\xe2\x82\xac\n")})...))
	f.Add(append(append([]byte{0}, repeatChunk(false, false, "\xe2\x82\xac", 255)...), 4, '\n'))
	// A valid character then continuation bytes around 1020-1024 (monitor.c
	// escaped in 1 KiB steps that split such a run).
	long := strings.Repeat("x", 1017) + "\xf0\x9f\x98\x80\x80\x80\x80\x80\n"
	f.Add(append([]byte{0}, encodeChunks(outChunk{data: []byte(long)})...))
	f.Add(append(append([]byte{0}, repeatChunk(true, false, "\x80", 255)...), repeatChunk(false, true, "\"\x01\xff", 40)...))
	// Rotations.
	f.Add(append(append([]byte{1}, repeatChunk(false, false, "line\n", 40)...), repeatChunk(true, true, "other line\n", 90)...))
	f.Add(append([]byte{1}, repeatChunk(false, false, "\x01", 255)...))

	dir := f.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		os.Chmod(d, 0o755)
	}
	full, sanitized := buildMonitor(f, dir, "monitor")
	small, _ := buildMonitor(f, dir, "monitor-small", fmt.Sprintf("-DMAX_LOG=%d", smallLog), "-DREADER_GRACE_MS=100")
	if full == "" {
		f.Log("no C compiler: the embedded monitor, without the small log bound")
		b, err := New(filepath.Join(dir, "root"))
		if err != nil {
			f.Fatal(err)
		}
		bins, err := b.binaries()
		b.Close()
		if err != nil {
			f.Fatal(err)
		}
		full = bins.monitor
	} else if !sanitized {
		f.Log("built without sanitizers: the C compiler has none that run here")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		bin, bound := full, maxLog
		if data[0]&1 != 0 {
			if small == "" {
				t.Skip("no C compiler for the small-log build")
			}
			bin, bound = small, smallLog
		}
		chunks := parseChunks(data[1:])
		r := startMonitor(t, bin, filepath.Join(fastTempDir(t), "root"), "/bin/true", "pipes")
		var want [2][]byte
		for _, c := range chunks {
			w, i := r.out, 0
			if c.stderr {
				w, i = r.err, 1
			}
			want[i] = append(want[i], c.data...)
			writeSynced(t, w, c.data, c.sync)
		}
		r.exit(0)
		var got [2]strings.Builder
		for _, l := range logPieces(t, r.dir, bound) {
			if l.Stream == "stderr" {
				got[1].WriteString(l.Log)
			} else {
				got[0].WriteString(l.Log)
			}
		}
		for i, name := range []string{"stdout", "stderr"} {
			g, w := got[i].String(), jsonText(t, want[i])
			if bound == maxLog && g != w || !strings.HasSuffix(w, g) {
				j := 0
				for j < min(len(g), len(w)) && g[j] == w[j] {
					j++
				}
				t.Fatalf("%s in the log (%d bytes) is not Go's json-file text (%d bytes): from byte %d %q, want %q",
					name, len(g), len(w), j, g[j:min(len(g), j+40)], w[j:min(len(w), j+40)])
			}
		}
	})
}
