// Package imagebuild builds images from Dockerfiles without a daemon, as
// docker's classic builder does: each RUN runs in a slopbox sandbox
// (sandbox.SpawnBuildStep) over the layers so far, and its upper directory
// becomes the step's layer; COPY and ADD write their layer from the
// context directly, through an os.Root, with no sandbox. The Dockerfile is
// parsed by BuildKit's parser and instructions packages, and words are
// expanded by its shell lexer, so syntax and variable expansion are
// Docker's own.
//
// Layer-making steps are cached in the store (image.Store.CachedLayer): a
// step is reused when everything before it (the base image and every
// earlier instruction, with the build args it used), its own instruction
// and, for COPY and ADD, the digest of what it copies are the same.
//
// A build holds the store's helper session (image.Store.Hold): its layer
// and cache writes go to one helper process in the store's user namespace
// rather than one each. A RUN step's sandbox is removed in the background
// once its layer is recorded; Build returns when all are gone. What a step
// costs beyond its command is then mostly the start of its sandbox (an
// overlay of its own layers, so not one the sandbox pool could start ahead):
// BenchmarkRunStep and bench/cmd/apibench measure it.
package imagebuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/image/archive"
	"github.com/slopbox/slopbox/sandbox"
)

// Options describe one build.
type Options struct {
	// ContextDir is the build context (a directory).
	ContextDir string
	// Dockerfile is its path inside the context (default "Dockerfile"),
	// unless DockerfileContent is set.
	Dockerfile        string
	DockerfileContent []byte
	Tags              []string
	BuildArgs         map[string]string
	Target            string
	NoCache, Pull     bool
	// Network is none, host or bridge; empty: bridge where it works.
	Network string
	Labels  map[string]string
	// CacheFrom names images whose steps the build may reuse, as docker's
	// --cache-from: with it set, the local cache is not used; a step is
	// reused when such an image's history up to it (and its layers) is
	// the build's so far, and its next entry is the same instruction.
	// Names not in the store are passed over.
	CacheFrom []string
	// ExtraHosts ("NAME:IP", --add-host) are in RUN steps' /etc/hosts.
	ExtraHosts []string
	// Out receives the classic builder's progress ("Step 1/3 : …") and the
	// output of RUN; nil discards it.
	Out io.Writer
	// Err receives RUN's standard error; nil: Out.
	Err io.Writer
}

// Result is a built image.
type Result struct {
	ID     string // config digest, as docker's image id
	Digest string // manifest digest
	Tags   []string
}

// StepError is a failed step.
type StepError struct {
	Step     string // the instruction as written
	Line     int
	ExitCode int // RUN's exit code; 0 for other failures
	Err      error
}

func (e *StepError) Error() string {
	if e.ExitCode != 0 {
		return fmt.Sprintf("line %d: %s: returned a non-zero code: %d", e.Line, e.Step, e.ExitCode)
	}
	return fmt.Sprintf("line %d: %s: %v", e.Line, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Builder builds images into a backend's store.
type Builder struct {
	b   *sandbox.Backend
	out io.Writer
	err io.Writer
	o   Options
	lex *shell.Lex
	// noBridge is set once a bridge step could not start.
	noBridge bool
	// cacheFrom is Options.CacheFrom's images found in the store.
	cacheFrom []cacheImage
	marks     *markRun
	ctx       context.Context
	// removing is the step sandboxes being removed in the background.
	removing sync.WaitGroup
	// ignore is the context's .dockerignore, once read.
	ignore *ignoreFile
	// expanded counts the bytes of the words expanded for the current
	// instruction (see sizeCheck).
	expanded int
}

// cacheImage is an image given as --cache-from.
type cacheImage struct {
	cfg    *v1.ConfigFile
	layers []ocispec.Descriptor
}

// New returns a builder over b.
func New(b *sandbox.Backend) *Builder { return &Builder{b: b} }

// stage is the state of one stage being built.
type stage struct {
	name   string
	cfg    *v1.ConfigFile
	base   []ocispec.Descriptor
	added  []image.NewLayer
	chain  string            // cache chain: everything so far
	args   map[string]string // ARGs declared in the stage, with values
	shell  []string
	layers []string // extracted layer directories, oldest first
	size   sizeCheck
}

// Build runs the build. On failure nothing is tagged.
func (bl *Builder) Build(ctx context.Context, o Options) (*Result, error) {
	bl.o, bl.out, bl.ctx, bl.ignore = o, o.Out, ctx, nil
	// One store helper for the build's writes rather than one per step.
	defer bl.b.Store().Hold()()
	// Step sandboxes are removed once their layer is recorded, while the
	// build goes on; the build returns once they are gone.
	defer bl.removing.Wait()
	defer bl.flushMarks()
	if bl.out == nil {
		bl.out = io.Discard
	}
	bl.err = o.Err
	if bl.err == nil {
		bl.err = bl.out
	}
	df, err := bl.dockerfile()
	if err != nil {
		return nil, err
	}
	res, err := parser.Parse(bytes.NewReader(df))
	if err != nil {
		return nil, fmt.Errorf("Dockerfile: %w", err)
	}
	bl.lex = shell.NewLex(res.EscapeToken)
	bl.loadCacheFrom(o.CacheFrom)
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("Dockerfile: %w", err)
	}
	if stages, err = targetStages(stages, o.Target); err != nil {
		return nil, err
	}
	meta, err := bl.metaArgs(metaArgs)
	if err != nil {
		return nil, err
	}
	cur, err := bl.buildStages(ctx, stages, meta)
	if err != nil {
		return nil, err
	}
	return bl.finish(cur)
}

// loadCacheFrom sets bl.cacheFrom to the images of names (--cache-from)
// found in the store with all their layers; as docker's, an image it
// cannot find is no cache, and no error.
func (bl *Builder) loadCacheFrom(names []string) {
	bl.cacheFrom = nil
	for _, name := range names {
		img, err := bl.b.Store().Get(name)
		if err != nil {
			continue // as docker's: an image it cannot find is no cache
		}
		if ls, err := bl.b.Store().ManifestLayers(img.Digest); err == nil && len(ls) == len(img.Config.RootFS.DiffIDs) {
			bl.cacheFrom = append(bl.cacheFrom, cacheImage{cfg: img.Config, layers: ls})
		}
	}
}

// targetStages is the stages the build runs: all of them, or those up to
// target (--target) when one is given. It refuses a Dockerfile with no
// stage, and ONBUILD in one of those it runs.
func targetStages(stages []instructions.Stage, target string) ([]instructions.Stage, error) {
	if len(stages) == 0 {
		return nil, errors.New("Dockerfile: no FROM instruction")
	}
	last := len(stages) - 1
	if target != "" {
		last = slices.IndexFunc(stages, func(s instructions.Stage) bool { return strings.EqualFold(s.Name, target) })
		if last < 0 {
			return nil, fmt.Errorf("target stage %q could not be found", target)
		}
	}
	for _, st := range stages[:last+1] {
		for _, c := range st.Commands {
			if ob, ok := c.(*instructions.OnbuildCommand); ok {
				return nil, fmt.Errorf("Dockerfile: line %d: ONBUILD is not supported by slopbox build", line(ob))
			}
		}
	}
	return stages[:last+1], nil
}

// metaArgs is the values of the ARGs before the first FROM: each
// expanded with those before it, a build arg replacing it, all of them
// bounded by MaxConfigBytes.
func (bl *Builder) metaArgs(metaArgs []instructions.ArgCommand) (map[string]string, error) {
	meta := map[string]string{}
	metaSize := 0
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			v := ""
			if kv.Value != nil {
				var err error
				if v, err = bl.expand(*kv.Value, envList(meta)); err != nil {
					return nil, fmt.Errorf("Dockerfile: line %d: %w", line(&a), err)
				}
			}
			if bv, ok := bl.o.BuildArgs[kv.Key]; ok {
				v = bv
			}
			meta[kv.Key] = v
			if metaSize += len(kv.Key) + len(v); metaSize > MaxConfigBytes {
				return nil, fmt.Errorf("Dockerfile: line %d: the ARGs before FROM are over %d MiB, slopbox's bound for a stage's config and build args: refused", line(&a), MaxConfigBytes>>20)
			}
		}
	}
	return meta, nil
}

// buildStages builds stages in order, printing each step as docker's
// builder does ("Step N/TOTAL : ..." and " ---> ID"), and returns the last
// one. A built stage is found by its index and its name (lower case).
func (bl *Builder) buildStages(ctx context.Context, stages []instructions.Stage, meta map[string]string) (*stage, error) {
	total := 0
	for _, st := range stages {
		total += 1 + len(st.Commands)
	}
	done := map[string]*stage{}
	var cur *stage
	var err error
	step := 0
	for i, st := range stages {
		step++
		fmt.Fprintf(bl.out, "Step %d/%d : %s\n", step, total, st.SourceCode)
		if cur, err = bl.from(ctx, st, meta, done); err != nil {
			return nil, &StepError{Step: st.SourceCode, Line: st.Location[0].Start.Line, Err: err}
		}
		fmt.Fprintf(bl.out, " ---> %s\n", short(cur.chain))
		for _, c := range st.Commands {
			step++
			src := c.(interface{ String() string }).String()
			fmt.Fprintf(bl.out, "Step %d/%d : %s\n", step, total, src)
			if err := bl.step(ctx, cur, c, src, done); err != nil {
				return nil, err
			}
			fmt.Fprintf(bl.out, " ---> %s\n", short(cur.chain))
		}
		bl.flushMarks()
		done[fmt.Sprint(i)] = cur
		if st.Name != "" {
			done[strings.ToLower(st.Name)] = cur
		}
	}
	return cur, nil
}

// step runs instruction c (its source src) in stage s and checks the
// stage's growth; its error is a StepError naming the instruction.
func (bl *Builder) step(ctx context.Context, s *stage, c instructions.Command, src string, done map[string]*stage) error {
	bl.expanded = 0
	err := bl.command(ctx, s, c, done)
	if err == nil {
		err = s.grew(len(src) + bl.expanded + len(strings.Join(s.shell, " ")))
	}
	if err != nil {
		var se *StepError
		if errors.As(err, &se) {
			se.Step, se.Line = src, line(c)
			return se
		}
		return &StepError{Step: src, Line: line(c), Err: err}
	}
	return nil
}

func (bl *Builder) finish(st *stage) (*Result, error) {
	cfg := st.cfg
	cfg.Created = v1.Time{Time: image.Now()}
	if len(bl.o.Labels) > 0 {
		if cfg.Config.Labels == nil {
			cfg.Config.Labels = map[string]string{}
		}
		for k, v := range bl.o.Labels {
			cfg.Config.Labels[k] = v
		}
	}
	dgst, err := bl.b.Store().WriteBuilt(cfg, st.base, st.added, bl.o.Tags)
	if err != nil {
		return nil, err
	}
	img, err := bl.b.Store().Get(dgst)
	if err != nil {
		return nil, err
	}
	return &Result{ID: img.ID, Digest: dgst, Tags: bl.o.Tags}, nil
}

func (bl *Builder) dockerfile() ([]byte, error) {
	if bl.o.DockerfileContent != nil {
		if len(bl.o.DockerfileContent) > MaxDockerfileBytes {
			return nil, fmt.Errorf("the Dockerfile is over %d MiB, slopbox's bound for a Dockerfile: refused", MaxDockerfileBytes>>20)
		}
		return bl.o.DockerfileContent, nil
	}
	name := bl.o.Dockerfile
	if name == "" {
		name = "Dockerfile"
	}
	root, err := os.OpenRoot(bl.o.ContextDir)
	if err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	defer root.Close()
	b, err := readBounded(root, path.Clean(name), "Dockerfile", MaxDockerfileBytes)
	if err != nil {
		return nil, fmt.Errorf("Dockerfile %s in the build context: %w", name, err)
	}
	return b, nil
}

// from starts a stage.
func (bl *Builder) from(ctx context.Context, st instructions.Stage, meta map[string]string, done map[string]*stage) (*stage, error) {
	name, err := bl.expand(st.BaseName, envList(meta))
	if err != nil {
		return nil, err
	}
	s := &stage{name: st.Name, args: map[string]string{}}
	if prev, ok := done[strings.ToLower(name)]; ok {
		cp := *prev
		cfg := *prev.cfg.DeepCopy()
		cp.cfg, cp.name, cp.args = &cfg, st.Name, map[string]string{}
		cp.base, cp.added, cp.layers = slices.Clone(prev.base), slices.Clone(prev.added), slices.Clone(prev.layers)
		return &cp, nil
	}
	if name == "scratch" {
		s.cfg = &v1.ConfigFile{OS: "linux", Architecture: image.HostPlatform().Architecture, RootFS: v1.RootFS{Type: "layers"}}
		s.chain = hash("scratch")
		return s, s.measure()
	}
	store := bl.b.Store()
	img, err := store.Get(name)
	if err != nil || bl.o.Pull {
		if errors.Is(err, image.ErrNotFound) || bl.o.Pull {
			if img, err = store.Pull(ctx, name); err != nil {
				return nil, err
			}
		} else {
			return nil, err
		}
	}
	if s.base, err = store.ManifestLayers(img.Digest); err != nil {
		return nil, err
	}
	s.cfg = img.Config.DeepCopy()
	s.cfg.History = slices.Clone(s.cfg.History)
	s.layers = slices.Clone(img.Layers)
	s.chain = hash(img.Digest)
	return s, s.measure()
}

// command runs one instruction of stage s.
func (bl *Builder) command(ctx context.Context, s *stage, c instructions.Command, done map[string]*stage) error {
	env := s.expandEnv()
	if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if _, isRun := c.(*instructions.RunCommand); !isRun {
			if err := e.Expand(func(w string) (string, error) { return bl.expand(w, env) }); err != nil {
				return err
			}
		}
	}
	src := c.(interface{ String() string }).String()
	cfg := &s.cfg.Config
	switch c.(type) {
	case *instructions.RunCommand, *instructions.CopyCommand, *instructions.AddCommand:
		bl.flushMarks()
	}
	switch c := c.(type) {
	case *instructions.EnvCommand, *instructions.LabelCommand, *instructions.UserCommand, *instructions.ExposeCommand,
		*instructions.VolumeCommand, *instructions.StopSignalCommand:
		applyChange(cfg, c) // as commit's and import's --change
	case *instructions.ArgCommand:
		for _, kv := range c.Args {
			v, declared := "", kv.Value != nil
			if declared {
				v = *kv.Value
			}
			if bv, ok := bl.o.BuildArgs[kv.Key]; ok {
				v, declared = bv, true
			}
			if declared {
				s.args[kv.Key] = v
			} else if _, ok := s.args[kv.Key]; !ok {
				s.args[kv.Key] = ""
			}
		}
	case *instructions.WorkdirCommand:
		applyChange(cfg, c)
		if err := bl.workdir(ctx, s); err != nil {
			return err
		}
	case *instructions.CmdCommand:
		cfg.Cmd = bl.cmdline(s, c.ShellDependantCmdLine)
	case *instructions.EntrypointCommand:
		cfg.Entrypoint = bl.cmdline(s, c.ShellDependantCmdLine)
	case *instructions.ShellCommand:
		s.shell = slices.Clone(c.Shell)
	case *instructions.HealthCheckCommand:
		h := c.Health
		cfg.Healthcheck = &v1.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
	case *instructions.MaintainerCommand:
		s.cfg.Author = c.Maintainer
	case *instructions.RunCommand:
		return bl.run(ctx, s, c, src)
	case *instructions.CopyCommand:
		return bl.copy(ctx, s, copySpec{src: src, sources: c.SourcePaths, dest: c.DestPath, from: c.From, chown: c.Chown, chmod: c.Chmod, contents: c.SourceContents}, done)
	case *instructions.AddCommand:
		return bl.copy(ctx, s, copySpec{src: src, sources: c.SourcePaths, dest: c.DestPath, chown: c.Chown, chmod: c.Chmod, add: true, contents: c.SourceContents}, done)
	default:
		return fmt.Errorf("%s is not supported by slopbox build", strings.ToUpper(c.Name()))
	}
	key := hash(s.chain, src, s.argsKey())
	bl.metaCache(s, key, src)
	s.chain = key
	s.cfg.History = append(s.cfg.History, v1.History{Created: v1.Time{Time: image.Now()}, CreatedBy: src, EmptyLayer: true})
	return nil
}

// metaCache says " ---> Using cache" for a step that makes no layer (ENV,
// LABEL, …) when it was built before, as docker's classic builder does for
// every step. Runs of such steps are recorded together (markRun), once
// the run ends, with the layer they stand on: image prune drops them with
// it.
func (bl *Builder) metaCache(s *stage, key, src string) {
	top, ok := s.top()
	if !ok {
		return // FROM scratch and no layer yet: nothing to record
	}
	if bl.marks != nil && bl.marks.top.DiffID != top.DiffID {
		bl.flushMarks()
	}
	if bl.marks == nil {
		bl.marks = &markRun{start: key, top: top, known: bl.b.Store().CacheMarks(key)}
	}
	m := bl.marks
	m.keys = append(m.keys, key)
	m.dirty = m.dirty || !m.known[key]
	hit := false
	switch {
	case bl.o.NoCache:
	case len(bl.o.CacheFrom) > 0:
		_, hit = bl.cacheFromHit(s, src, false)
	default:
		hit = m.known[key]
	}
	if hit {
		fmt.Fprintln(bl.out, " ---> Using cache")
	}
}

// markRun is a run of steps that make no layer, being built.
type markRun struct {
	start string // the first step's key, which names the run
	top   image.NewLayer
	known map[string]bool // recorded by an earlier build
	keys  []string
	dirty bool
}

// flushMarks records the run of layerless steps that just ended.
func (bl *Builder) flushMarks() {
	m := bl.marks
	bl.marks = nil
	if m == nil || !m.dirty || bl.ctx.Err() != nil {
		return
	}
	if err := bl.b.Store().PutCacheMarks(bl.ctx, m.start, m.top, m.keys); err != nil {
		fmt.Fprintf(bl.out, " ---> (steps not cached: %v)\n", err)
	}
}

// cached is the layer the cache holds for a layer-making step with key:
// the local cache's, or with --cache-from that image's next layer
// (content, for COPY and ADD, being the local cache's: an image's history
// does not say what it copied).
func (bl *Builder) cached(s *stage, key, src string, content bool) (image.NewLayer, bool) {
	if bl.o.NoCache {
		return image.NewLayer{}, false
	}
	store := bl.b.Store()
	local, ok := store.CachedLayer(key)
	if len(bl.o.CacheFrom) == 0 {
		return local, ok
	}
	nl, hit := bl.cacheFromHit(s, src, true)
	if !hit || content && (!ok || local.DiffID != nl.DiffID) {
		return image.NewLayer{}, false
	}
	if !ok {
		store.PutCache(bl.ctx, key, nl)
	}
	return nl, true
}

// cacheFromHit finds, among the --cache-from images, one whose history
// and layers so far are s's and whose next history entry is src (making
// a layer or not, as layer says); its layer, when it makes one.
func (bl *Builder) cacheFromHit(s *stage, src string, layer bool) (image.NewLayer, bool) {
	h, n := len(s.cfg.History), len(s.cfg.RootFS.DiffIDs)
next:
	for _, ci := range bl.cacheFrom {
		if h >= len(ci.cfg.History) || n > len(ci.cfg.RootFS.DiffIDs) || layer && n == len(ci.cfg.RootFS.DiffIDs) {
			continue
		}
		for i := range h {
			a, b := ci.cfg.History[i], s.cfg.History[i]
			if a.CreatedBy != b.CreatedBy || a.EmptyLayer != b.EmptyLayer {
				continue next
			}
		}
		if !slices.Equal(ci.cfg.RootFS.DiffIDs[:n], s.cfg.RootFS.DiffIDs) {
			continue
		}
		if e := ci.cfg.History[h]; e.CreatedBy != src || e.EmptyLayer == layer {
			continue
		}
		if !layer {
			return image.NewLayer{}, true
		}
		d, err := v1.NewHash(ci.layers[n].Digest.String())
		if err != nil {
			continue
		}
		nl := image.NewLayer{DiffID: ci.cfg.RootFS.DiffIDs[n], Digest: d, Size: ci.layers[n].Size}
		if _, err := os.Stat(bl.b.Store().LayerDir(nl.DiffID)); err != nil {
			continue
		}
		return nl, true
	}
	return image.NewLayer{}, false
}

// top is the layer the stage stands on so far.
func (s *stage) top() (image.NewLayer, bool) {
	if n := len(s.added); n > 0 {
		return s.added[n-1], true
	}
	n := len(s.base)
	if n == 0 || n > len(s.cfg.RootFS.DiffIDs) {
		return image.NewLayer{}, false
	}
	d, err := v1.NewHash(s.base[n-1].Digest.String())
	if err != nil {
		return image.NewLayer{}, false
	}
	return image.NewLayer{DiffID: s.cfg.RootFS.DiffIDs[n-1], Digest: d, Size: s.base[n-1].Size}, true
}

// cmdline is CMD's or ENTRYPOINT's argv: the shell form runs through SHELL.
func (bl *Builder) cmdline(s *stage, c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return append(s.shellOr(), strings.Join(c.CmdLine, " "))
	}
	return slices.Clone(c.CmdLine)
}

func (s *stage) shellOr() []string {
	if len(s.shell) > 0 {
		return slices.Clone(s.shell)
	}
	return []string{"/bin/sh", "-c"}
}

// expandEnv is what words are expanded with: the stage's ARGs, then ENV.
func (s *stage) expandEnv() []string {
	env := slices.Clone(s.cfg.Config.Env)
	for k, v := range s.args {
		if !hasEnv(env, k) {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// argsKey is the build args a step sees, for its cache key.
func (s *stage) argsKey() string {
	return strings.Join(envList(s.args), "\x00")
}

func hasEnv(env []string, k string) bool {
	return slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
}

func setEnv(env []string, k, v string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, k+"=") })
	return append(out, k+"="+v)
}

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func line(c interface{ Location() []parser.Range }) int {
	if l := c.Location(); len(l) > 0 {
		return l[0].Start.Line
	}
	return 0
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func short(h string) string { return h[:12] }

// addLayer appends nl to s, recording it in the history as made by src.
func (s *stage) addLayer(nl image.NewLayer, dir, src string) {
	s.added = append(s.added, nl)
	s.layers = append(s.layers, dir)
	s.cfg.RootFS.DiffIDs = append(s.cfg.RootFS.DiffIDs, nl.DiffID)
	s.cfg.History = append(s.cfg.History, v1.History{Created: v1.Time{Time: image.Now()}, CreatedBy: src})
}

// stepImage is the image a RUN step's sandbox runs over.
func (s *stage) stepImage() *image.Image {
	return &image.Image{Name: "build-step", Config: s.cfg, Layers: slices.Clone(s.layers)}
}

// run runs a RUN step in a sandbox and takes its upper directory as the
// step's layer.
func (bl *Builder) run(ctx context.Context, s *stage, c *instructions.RunCommand, src string) error {
	if len(c.FlagsUsed) > 0 {
		return fmt.Errorf("RUN --%s is not supported by slopbox build", c.FlagsUsed[0])
	}
	if len(c.Files) > 0 {
		return errors.New("RUN with a here-document is not supported by slopbox build")
	}
	argv := bl.cmdline(s, c.ShellDependantCmdLine)
	key := hash(s.chain, src, strings.Join(argv, "\x00"), s.argsKey())
	store := bl.b.Store()
	if nl, ok := bl.cached(s, key, src, false); ok {
		fmt.Fprintln(bl.out, " ---> Using cache")
		s.addLayer(nl, store.LayerDir(nl.DiffID), src)
		s.chain = key
		return nil
	}
	if len(s.layers) == 0 {
		return errors.New("RUN needs a base image with a shell (FROM scratch has no files)")
	}
	env := map[string]string{}
	// Docker's predefined ARGs reach RUN without an ARG line, and stay out
	// of the cache key and the image.
	for _, k := range proxyArgs {
		if v, ok := bl.o.BuildArgs[k]; ok && !hasEnv(s.cfg.Config.Env, k) {
			env[k] = v
		}
	}
	for k, v := range s.args {
		if !hasEnv(s.cfg.Config.Env, k) {
			env[k] = v
		}
	}
	network := bl.o.Network
	if network == "" {
		network = backend.NetworkBridge
		if bl.noBridge {
			network = backend.NetworkNone
		}
	}
	spec := backend.SpawnSpec{NoWorkspaceMount: true, DisableSetup: true, Network: network, Env: env,
		User: cmpOr(s.cfg.Config.User, "0:0"), Cwd: cmpOr(s.cfg.Config.WorkingDir, "/"), ExtraHosts: bl.o.ExtraHosts}
	sb, err := bl.b.SpawnBuildStep(ctx, spec, s.stepImage())
	if err != nil && bl.o.Network == "" && network == backend.NetworkBridge {
		// Bridge where it works, as docker's classic builder.
		bl.noBridge = true
		spec.Network = backend.NetworkNone
		sb, err = bl.b.SpawnBuildStep(ctx, spec, s.stepImage())
	}
	if err != nil {
		return err
	}
	removed := false
	defer func() {
		if !removed {
			sb.Remove()
		}
	}()
	fmt.Fprintf(bl.out, " ---> Running in %s\n", sb.ID()[:12])
	events, err := sb.Stream(ctx, backend.ExecRequest{Argv: argv, NoSetup: true})
	if err != nil {
		return err
	}
	code := -1
	for ev := range events {
		switch ev.Kind {
		case backend.EventStdout:
			io.WriteString(bl.out, ev.Data)
		case backend.EventStderr:
			io.WriteString(bl.err, ev.Data)
		case backend.EventFinished:
			if ev.Result != nil {
				code = ev.Result.ExitCode
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if code != 0 {
		return &StepError{ExitCode: code, Err: fmt.Errorf("The command '%s' returned a non-zero code: %d", strings.Join(argv, " "), code)}
	}
	// Nothing the step started runs on while its layer is read.
	if err := sb.Stop(); err != nil {
		return err
	}
	nl, err := store.CommitDir(ctx, sb.UpperDir(), key)
	if err != nil {
		return err
	}
	// The layer is in the store: the sandbox goes in the background. A
	// build killed before it is gone leaves it as one killed mid-step
	// does: recorded as this process's, for prune.
	removed = true
	bl.removing.Go(func() { sb.Remove() })
	s.addLayer(nl, store.LayerDir(nl.DiffID), src)
	s.chain = key
	return nil
}

// proxyArgs are docker's predefined build args.
var proxyArgs = []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "FTP_PROXY", "ftp_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ContextFromTar reads a build context sent as a tar (plain or
// compressed: docker build -, POST /build) into a new temporary directory,
// through archive.ApplyLayer (no entry lands outside it), owned by the
// caller. A stream that is not a tar is taken as the Dockerfile of an
// empty context, as docker does. remove deletes the directory.
func ContextFromTar(r io.Reader) (dir string, dockerfile []byte, remove func(), err error) {
	dir, err = os.MkdirTemp("", "slopbox-context-")
	if err != nil {
		return "", nil, nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	br := bufio.NewReaderSize(r, 1<<20)
	magic, _ := br.Peek(512)
	compressed := len(magic) >= 4 && (magic[0] == 0x1f && magic[1] == 0x8b || magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
	if !compressed && (len(magic) < 262 || string(magic[257:262]) != "ustar") {
		b, err := io.ReadAll(io.LimitReader(br, MaxDockerfileBytes+1))
		if err == nil && len(b) > MaxDockerfileBytes {
			err = fmt.Errorf("the Dockerfile is over %d MiB, slopbox's bound for a Dockerfile: refused", MaxDockerfileBytes>>20)
		}
		if err != nil {
			remove()
			return "", nil, nil, err
		}
		return dir, b, remove, nil
	}
	var tr io.Reader = br
	if magic[0] == 0x1f {
		zr, err := gzip.NewReader(br)
		if err != nil {
			remove()
			return "", nil, nil, fmt.Errorf("build context: %w", err)
		}
		tr = zr
	} else if compressed {
		zr, err := zstd.NewReader(br)
		if err != nil {
			remove()
			return "", nil, nil, fmt.Errorf("build context: %w", err)
		}
		defer zr.Close()
		tr = zr
	}
	// What the context expands to is bounded by the free space where it
	// is unpacked: a small compressed body must not fill the disk.
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		tr = &boundedReader{r: tr, left: int64(st.Bavail) * st.Bsize}
	}
	uid, gid := os.Getuid(), os.Getgid()
	if _, err := archive.ApplyLayer(dir, tr, archive.ApplyOptions{IDs: func(int, int) (int, int) { return uid, gid }}); err != nil {
		remove()
		return "", nil, nil, fmt.Errorf("build context: %w", err)
	}
	return dir, nil, remove, nil
}

// boundedReader fails once more than left bytes have been read.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("the build context expands to more than the free space to unpack it")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
