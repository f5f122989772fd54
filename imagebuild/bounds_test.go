package imagebuild

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/sandbox"
	"github.com/slopbox/slopbox/test/fixtures"
)

// buildAnswers runs the build of dir and returns its error, failing the
// test if it has not answered after fixtures.Patience: a hang, not a slow
// build. fifos are opened for writing then, so that a read waiting on
// one returns and the build ends.
func buildAnswers(t *testing.T, b *sandbox.Backend, dir, tag string, fifos ...string) (string, error) {
	t.Helper()
	return buildAnswersWithin(t, b, fixtures.Patience(), dir, tag, fifos...)
}

// buildAnswersWithin is buildAnswers with its own bound, for a build of
// many steps (under the race detector 100000 ENV steps took 53 s in run
// 57 and over a minute in run 58: slow, not hung).
func buildAnswersWithin(t *testing.T, b *sandbox.Backend, patience time.Duration, dir, tag string, fifos ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := New(b).Build(context.Background(), Options{ContextDir: dir, Tags: []string{tag}, Out: &out, Network: "none"})
		done <- err
	}()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(patience):
		for _, f := range fifos {
			if fd, err := unix.Open(f, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
		<-done
		t.Fatalf("the build of %s hung: no answer after %s\n%s", dir, patience, out.String())
		return "", nil
	}
}

// TestBuildExpansionBounded: a Dockerfile of a few hundred bytes whose ENV
// doubles at each line (it grew without bound: 3 GB for 24 lines), a
// ${X//?/$X} that squares, build args that add up, and a config that
// grows line by line are each refused, naming the bound, before they
// are built; ordinary substitutions still work.
func TestBuildExpansionBounded(t *testing.T) {
	b := testBackend(t)
	doubling := "FROM base\nENV X=0123456789abcdef\n" + strings.Repeat("ENV X=$X$X\n", 22)
	for _, c := range []struct{ name, dockerfile, want string }{
		{"doubling", doubling, `line 18: ENV X=$X$X: "$X$X" expands to more than 1 MiB, slopbox's bound for one word`},
		{"replace", "FROM base\nENV X=" + strings.Repeat("x", 2000) + "\nENV Y=${X//?/$X}\n", `expands to more than 1 MiB`},
		{"args", "FROM base\nARG X=0123456789abcdef\n" + strings.Repeat("ARG X=$X$X\n", 15) + "ARG A=$X\nARG B=$X\nARG C=$X\nARG D=$X\nARG E=$X\nARG F=$X\nARG G=$X\nARG H=$X\nARG I=$X\n",
			"over the 4 MiB bound for image configs"},
		{"config", "FROM base\n" + strings.Repeat("ENV X=1\n", 100000), "over the 4 MiB bound for image configs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeContext(t, map[string]string{"Dockerfile": c.dockerfile})
			patience := fixtures.Patience()
			if c.name == "config" {
				patience *= 5 // 100000 steps
			}
			out, err := buildAnswersWithin(t, b, patience, dir, "bounded-"+c.name)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q\n%.2000s", err, c.want, out)
			}
			if _, err := b.Store().Get("bounded-" + c.name); err == nil {
				t.Errorf("a refused build tagged bounded-%s", c.name)
			}
		})
	}
	// Within the bounds: a pattern replacement, and a word of 512 KiB.
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nENV P=/usr/local/bin:/usr/bin:/bin\nENV Q=\"${P//:/ }\"\n" +
		"ENV X=0123456789abcdef\n" + strings.Repeat("ENV X=$X$X\n", 15) + "ENV Y=${X}\n"})
	if out, err := buildAnswers(t, b, dir, "bounded-ok"); err != nil {
		t.Fatalf("%v\n%.2000s", err, out)
	}
	img, err := b.Store().Get("bounded-ok")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(img.Config.Config.Env, "\n")
	if !strings.Contains(env, "Q=/usr/local/bin /usr/bin /bin\n") || !strings.Contains(env, "Y="+strings.Repeat("0123456789abcdef", 1<<15)) {
		t.Errorf("env %.300q", env)
	}
}

// TestBuildInputsBounded: a Dockerfile over 1 MiB (BuildKit's parser holds
// some 150 times its size) and a .dockerignore over 1 MiB (200 MB took
// 3.5 GB) are refused, naming the bound.
func TestBuildInputsBounded(t *testing.T) {
	b := testBackend(t)
	big := strings.Repeat("# a comment line of a Dockerfile\n", 2<<20/33)
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"Dockerfile", map[string]string{"Dockerfile": "FROM base\n" + big}, "it is over 1 MiB, slopbox's bound for a Dockerfile"},
		{".dockerignore", map[string]string{"Dockerfile": "FROM base\nCOPY a /a\n", "a": "a\n", ".dockerignore": strings.Repeat("some/pattern/**\n", 2<<20/16)},
			".dockerignore: it is over 1 MiB, slopbox's bound for a .dockerignore"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeContext(t, c.files)
			out, err := buildAnswers(t, b, dir, "big-input")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q\n%.2000s", err, c.want, out)
			}
		})
	}
}

// TestBuildFIFOsAnswer: a FIFO planted as the Dockerfile, the
// .dockerignore or a COPY or ADD source hung the build (or, as a source,
// copied nothing); each is refused, naming the path and what it is. A
// FIFO inside a copied directory is left out, as BuildKit leaves it.
func TestBuildFIFOsAnswer(t *testing.T) {
	b := testBackend(t)
	for _, c := range []struct {
		name, fifo, dockerfile, want string
	}{
		{"Dockerfile", "Dockerfile", "", "Dockerfile is a named pipe (FIFO), not a regular file"},
		{".dockerignore", ".dockerignore", "FROM base\nCOPY a /a\n", ".dockerignore is a named pipe (FIFO), not a regular file"},
		{"COPY source", "p", "FROM base\nCOPY p /p\n", "COPY failed: p is a named pipe (FIFO), not a file or directory"},
		{"ADD source", "p", "FROM base\nADD p /p\n", "COPY failed: p is a named pipe (FIFO), not a file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"a": "a\n"}
			if c.dockerfile != "" {
				files["Dockerfile"] = c.dockerfile
			}
			dir := writeContext(t, files)
			fifo := filepath.Join(dir, c.fifo)
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := buildAnswers(t, b, dir, "fifo", fifo)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q\n%s", err, c.want, out)
			}
		})
	}
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nCOPY sub /sub\n", "sub/a": "a\n"})
	if err := syscall.Mkfifo(filepath.Join(dir, "sub", "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := buildAnswers(t, b, dir, "fifo-in-dir", filepath.Join(dir, "sub", "p")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := runIn(t, b, "fifo-in-dir", "0:0", "ls /sub"); got != "a\n" {
		t.Errorf("/sub holds %q, want the file only", got)
	}
}

// readIgnore reads .dockerignore once per build: a second COPY uses what
// the first read, whatever the file says by then.
func TestDockerignoreReadOncePerBuild(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("a\n"), 0o644)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	bl := &Builder{}
	first, err := bl.dockerignore(root)
	if err != nil || len(first.patterns) != 1 {
		t.Fatalf("%v %+v", err, first)
	}
	os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("a\nb\n"), 0o644)
	if again, _ := bl.dockerignore(root); again != first {
		t.Error(".dockerignore was read again within one build")
	}
}
