package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/sandbox"
	"github.com/slopbox/slopbox/test/fixtures"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func searchableTempDir(t testing.TB) string {
	d := t.TempDir()
	for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// testBackend is a backend whose store holds the busybox fixture as "base".
func testBackend(t testing.TB) *sandbox.Backend {
	t.Helper()
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/busybox:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
	b, err := sandbox.New(filepath.Join(searchableTempDir(t), "root"), image.WithLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	b.KeepReady(false)
	if _, err := b.Store().Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if err := b.Store().Tag(ref, "base"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer b.Close()
		if ids, err := b.Prune(true); err != nil {
			t.Errorf("prune: %v (%v)", err, ids)
		}
		// Rootless, the layers belong to subordinate ids: the store's
		// user namespace removes them.
		list, _ := b.Store().List()
		for _, img := range list {
			b.Store().Remove(img.Name)
		}
		if _, err := b.Store().PruneBuildCache(); err != nil {
			t.Errorf("prune the build cache: %v", err)
		}
	})
	return b
}

func writeContext(t testing.TB, files map[string]string) string {
	dir := searchableTempDir(t)
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runIn(t testing.TB, b *sandbox.Backend, ref, user, cmd string) string {
	t.Helper()
	sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, DisableSetup: true, User: user})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Cleanup()
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: cmd})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d: %s %s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// TestBuildSlopCodeBenchShapes builds SlopCodeBench's two Dockerfile
// shapes, runs the result as 1000:1000, and builds again from the cache.
func TestBuildSlopCodeBenchShapes(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	baseCtx := writeContext(t, map[string]string{"Dockerfile": `FROM base
ENV PATH=/opt/x:${PATH}
RUN mkdir -p /opt/x && echo built > /opt/x/marker
SHELL ["/bin/sh", "-lc"]
  ENV A=1 \
      B=2
RUN echo "$A$B" > /opt/ab
`})
	var out bytes.Buffer
	if _, err := New(b).Build(ctx, Options{ContextDir: baseCtx, Tags: []string{"scb-base"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	subCtx := writeContext(t, map[string]string{
		"Dockerfile": `FROM scb-base
RUN mkdir -p /app
COPY --chown=1000:1000 submission submission
ENV APP=1
WORKDIR /app
RUN cp -r /submission/. /app/ && echo ok > /app/ran
RUN chown -R 1000:1000 /app
USER 1000:1000
`,
		"submission/main.py":     "print('hi')\n",
		"submission/pkg/util.py": "x = 1\n",
	})
	out.Reset()
	res, err := New(b).Build(ctx, Options{ContextDir: subCtx, Tags: []string{"scb-sub"}, Out: &out, Network: "none"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := runIn(t, b, "scb-sub", "1000:1000", "id -u; pwd; stat -c '%u:%g %n' /submission/main.py /submission/pkg /app/main.py /app/ran; cat /opt/ab /opt/x/marker; echo $PATH")
	for _, want := range []string{"1000\n/app\n", "1000:1000 /submission/main.py", "1000:1000 /submission/pkg", "1000:1000 /app/main.py", "1000:1000 /app/ran", "12\nbuilt\n/opt/x:"} {
		if !strings.Contains(got, want) {
			t.Errorf("run output %q lacks %q", got, want)
		}
	}
	img, err := b.Store().Get("scb-sub")
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Config.User != "1000:1000" || img.Config.Config.WorkingDir != "/app" {
		t.Errorf("config user %q workdir %q", img.Config.Config.User, img.Config.Config.WorkingDir)
	}
	out.Reset()
	res2, err := New(b).Build(ctx, Options{ContextDir: subCtx, Tags: []string{"scb-sub"}, Out: &out, Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "Running in") || strings.Count(out.String(), "Using cache") != 7 {
		t.Errorf("second build is not all cache hits:\n%s", out.String())
	}
	if res2.ID == "" || res.Digest == "" {
		t.Errorf("results %+v %+v", res, res2)
	}
}

// TestBuildRefusesBadInput: clear errors, nothing tagged.
func TestBuildRefusesBadInput(t *testing.T) {
	b := testBackend(t)
	outside := filepath.Join(searchableTempDir(t), "secret")
	os.WriteFile(outside, []byte("secret"), 0o644)
	// Long, and within the 4 MiB bound for the image config (whose
	// history has an entry per line).
	long := "FROM base\n" + strings.Repeat("ENV X=1\n", 20000)
	cases := []struct {
		name, dockerfile, want string
		link                   bool
	}{
		{"unknown", "FROM base\nFROBNICATE x\n", "line 2: unknown instruction: FROBNICATE", false},
		{"onbuild", "FROM base\nONBUILD RUN true\n", "line 2: ONBUILD is not supported", false},
		{"missing", "FROM base\nCOPY nothere /x\n", "nothere", false},
		{"failing", "FROM base\nRUN echo failing-out; exit 3\n", "returned a non-zero code: 3", false},
		{"dotdot", "FROM base\nCOPY ../secret /x\n", "outside the build context", false},
		{"symlink", "FROM base\nCOPY link /x\n", "symlink out of the build context", true},
		{"long", long + "RUN exit 7\n", "non-zero code: 7", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeContext(t, map[string]string{"Dockerfile": c.dockerfile})
			if c.link {
				os.Symlink(outside, filepath.Join(dir, "link"))
			}
			var out bytes.Buffer
			_, err := New(b).Build(context.Background(), Options{ContextDir: dir, Tags: []string{"bad-" + c.name}, Out: &out, Network: "none"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q\n%s", err, c.want, out.String())
			}
			if c.name == "failing" && !strings.Contains(out.String(), "failing-out") {
				t.Errorf("the failing step's output is not shown:\n%s", out.String())
			}
			if _, err := b.Store().Get("bad-" + c.name); err == nil {
				t.Errorf("a failed build tagged bad-%s", c.name)
			}
		})
	}
}

// TestBuildCopyCacheIgnoresTimes: a context sent again (a tar unpacked
// anew, docker build's and docker-py's) has new modification times; its
// COPY is still a cache hit, as docker's TarSum key makes it, and a change
// of content is not.
func TestBuildCopyCacheIgnoresTimes(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nCOPY sub /sub\n", "sub/a.txt": "a\n"})
	build := func() string {
		var out bytes.Buffer
		if _, err := New(b).Build(ctx, Options{ContextDir: dir, Tags: []string{"copy-cache"}, Out: &out, Network: "none"}); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return out.String()
	}
	build()
	later := time.Now().Add(time.Hour)
	for _, p := range []string{"sub/a.txt", "sub"} {
		if err := os.Chtimes(filepath.Join(dir, p), later, later); err != nil {
			t.Fatal(err)
		}
	}
	if out := build(); !strings.Contains(out, "Using cache") {
		t.Errorf("new times only, yet COPY ran again:\n%s", out)
	}
	os.WriteFile(filepath.Join(dir, "sub/a.txt"), []byte("b\n"), 0o644)
	if out := build(); strings.Contains(out, "Using cache") {
		t.Errorf("new content, yet COPY came from the cache:\n%s", out)
	}
}

// TestBuildDockerignoreException: a file a "!" pattern takes back inside
// an excluded directory is copied (docker-py's test_build_with_dockerignore).
func TestBuildDockerignoreException(t *testing.T) {
	b := testBackend(t)
	dir := writeContext(t, map[string]string{
		"Dockerfile":                   "FROM base\nCOPY . /test\n",
		".dockerignore":                "ignored\nDockerfile\n.dockerignore\n!ignored/subdir/excepted-file\n",
		"kept":                         "k\n",
		"ignored/subdir/file":          "no\n",
		"ignored/subdir/excepted-file": "yes\n",
	})
	var out bytes.Buffer
	if _, err := New(b).Build(context.Background(), Options{ContextDir: dir, Tags: []string{"ignore-exc"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := runIn(t, b, "ignore-exc", "0:0", "find /test -type f | sort"); got != "/test/ignored/subdir/excepted-file\n/test/kept\n" {
		t.Errorf("copied files: %q", got)
	}
}

// "**" in .dockerignore spans directories, as the docker CLI reads it
// (an attacker's review: dir/**/*.key let dir/top.key and
// dir/a/b/deep.key into the image, path.Match taking ** as *).
func TestBuildDockerignoreDoubleStar(t *testing.T) {
	b := testBackend(t)
	dir := writeContext(t, map[string]string{
		"Dockerfile":       "FROM base\nCOPY . /test\n",
		".dockerignore":    "dir/**/*.key\nDockerfile\n.dockerignore\n",
		"dir/top.key":      "secret\n",
		"dir/a/b/deep.key": "secret\n",
		"dir/a/kept.txt":   "k\n",
	})
	var out bytes.Buffer
	if _, err := New(b).Build(context.Background(), Options{ContextDir: dir, Tags: []string{"ignore-star"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := runIn(t, b, "ignore-star", "0:0", "find /test -type f | sort"); got != "/test/dir/a/kept.txt\n" {
		t.Errorf("copied files: %q, want only dir/a/kept.txt", got)
	}
}

// TestBuildMultiStage: COPY --from takes files from an earlier stage (by
// name and by index) and from an image, keeping their owners and modes
// (a 0600 file of uid 1000 and a setuid one: read by the store, which
// sees them as the image has them, rootless too); --chown overrides the
// owner. --target stops at its stage: the image has stage one's files and
// none of stage two's, and stage two's steps do not run.
func TestBuildMultiStage(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	dir := writeContext(t, map[string]string{"Dockerfile": `FROM base AS builder
RUN mkdir -p /out/sub && echo from-stage-one > /out/hello && echo deep > /out/sub/deep && \
    echo private > /out/private && chown 1000:1000 /out/private && chmod 600 /out/private && \
    cp /bin/busybox /out/suid && chmod 4755 /out/suid
FROM base
COPY --from=builder /out/hello /hello
COPY --from=0 /out /copied/
COPY --from=builder --chown=7:8 /out/sub /chowned
COPY --from=base /bin/busybox /bb/
RUN echo stage-two-ran > /two
`})
	var out bytes.Buffer
	if _, err := New(b).Build(ctx, Options{ContextDir: dir, Tags: []string{"multi"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := runIn(t, b, "multi", "0:0", "cat /hello /copied/hello /copied/sub/deep /copied/private /chowned/deep /two; stat -c '%u:%g %a %n' /copied/private /copied/suid /chowned/deep; /bb/busybox echo bb-runs")
	for _, want := range []string{"from-stage-one\nfrom-stage-one\ndeep\nprivate\ndeep\nstage-two-ran\n", "1000:1000 600 /copied/private", "0:0 4755 /copied/suid", "7:8 644 /chowned/deep", "bb-runs"} {
		if !strings.Contains(got, want) {
			t.Errorf("run output %q lacks %q", got, want)
		}
	}
	out.Reset()
	if _, err := New(b).Build(ctx, Options{ContextDir: dir, Tags: []string{"multi"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "Running in") {
		t.Errorf("the second multi-stage build ran a step:\n%s", out.String())
	}

	out.Reset()
	if _, err := New(b).Build(ctx, Options{ContextDir: dir, Tags: []string{"first"}, Target: "builder", Out: &out, Network: "none", NoCache: true}); err != nil {
		t.Fatalf("--target: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Step 2/2 : RUN mkdir") || strings.Contains(out.String(), "COPY") {
		t.Errorf("--target builder: the build went past its stage:\n%s", out.String())
	}
	if got := runIn(t, b, "first", "0:0", "cat /out/hello; ls /two /hello 2>&1 | grep -c 'No such file'"); got != "from-stage-one\n2\n" {
		t.Errorf("--target builder image: %q", got)
	}
	if _, err := New(b).Build(ctx, Options{ContextDir: dir, Tags: []string{"nope"}, Target: "nosuch", Out: &out, Network: "none"}); err == nil || !strings.Contains(err.Error(), `target stage "nosuch" could not be found`) {
		t.Errorf("--target nosuch: %v", err)
	}
	bad := writeContext(t, map[string]string{"Dockerfile": "FROM base AS one\nFROM base\nCOPY --from=one /not/there /x\n"})
	if _, err := New(b).Build(ctx, Options{ContextDir: bad, Tags: []string{"nope"}, Out: &out, Network: "none"}); err == nil || !strings.Contains(err.Error(), "/not/there: not found in the source") {
		t.Errorf("COPY --from of a missing path: %v", err)
	}
}

// TestBuildCacheFrom: every step, layer or not, says "Using cache" when
// it was built before (docker's classic builder); with CacheFrom only the
// steps the named image's history has are reused, and a name the store
// lacks gives no cache (docker-py's test_build_with_cache_from).
func TestBuildCacheFrom(t *testing.T) {
	b := testBackend(t)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nENV FOO=bar\nRUN touch baz\nRUN touch bax\nLABEL x=y\n"})
	build := func(tag string, o Options) int {
		var out bytes.Buffer
		o.ContextDir, o.Tags, o.Out, o.Network = dir, []string{tag}, &out, "none"
		if _, err := New(b).Build(context.Background(), o); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return strings.Count(out.String(), "Using cache")
	}
	if n := build("cf1", Options{}); n != 0 {
		t.Errorf("first build: %d cache hits", n)
	}
	if n := build("cf1", Options{}); n != 4 {
		t.Errorf("second build: %d cache hits, want 4", n)
	}
	if n := build("cf2", Options{CacheFrom: []string{"cf1"}}); n != 4 {
		t.Errorf("--cache-from cf1: %d cache hits, want 4", n)
	}
	if n := build("cf3", Options{CacheFrom: []string{"nosuchtag"}}); n != 0 {
		t.Errorf("--cache-from nosuchtag: %d cache hits, want 0", n)
	}
	if n := build("cf4", Options{CacheFrom: []string{"base"}}); n != 0 {
		t.Errorf("--cache-from base (no step of this build): %d cache hits, want 0", n)
	}
}

// TestBuildRepeatedLayers: RUN steps that change nothing make the same
// empty layer; an image listing a layer several times builds, runs and
// takes COPY --from (overlayfs refuses a lowerdir given twice: "too many
// levels of symbolic links" at the third such step, found by make bench).
func TestBuildRepeatedLayers(t *testing.T) {
	b := testBackend(t)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base AS one\nRUN true 1\nRUN true 2\nRUN true 3\nRUN echo top > /top\nRUN true 4\nFROM one\nCOPY --from=one /top /copied\n"})
	var out bytes.Buffer
	if _, err := New(b).Build(context.Background(), Options{ContextDir: dir, Tags: []string{"repeated"}, Out: &out, Network: "none"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	img, err := b.Store().Get("repeated")
	if err != nil {
		t.Fatal(err)
	}
	seen, repeated := map[string]int{}, 0
	for _, id := range img.Config.RootFS.DiffIDs {
		if seen[id.String()]++; seen[id.String()] == 2 {
			repeated++
		}
	}
	if repeated == 0 {
		t.Fatalf("the image lists no layer twice: %v", img.Config.RootFS.DiffIDs)
	}
	if got := runIn(t, b, "repeated", "0:0", "cat /top /copied"); got != "top\ntop\n" {
		t.Errorf("run: %q", got)
	}
}

// TestBuildAddRefusalSaysWhy: an ADD archive whose entry would be written
// through one of its own symlinks out of the image is refused with what
// the layer writer said (it read `cannot parse hash: ":"`: a failed
// helper call's empty layer hid its error).
func TestBuildAddRefusalSaysWhy(t *testing.T) {
	b := testBackend(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc", Mode: 0o777})
	tw.WriteHeader(&tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("hi\n"))
	tw.Close()
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nADD evil.tar /x/\n", "evil.tar": buf.String()})
	var out bytes.Buffer
	_, err := New(b).Build(context.Background(), Options{ContextDir: dir, Tags: []string{"add-refused"}, Out: &out, Network: "none"})
	if err == nil || strings.Contains(err.Error(), "cannot parse hash") || !strings.Contains(err.Error(), `"x/l" is a symlink to "/etc": path escapes the layer root`) {
		t.Fatalf("error %v, want the entry and the symlink named\n%s", err, out.String())
	}
}
