package imagebuild

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/sandbox"
)

// CommitOptions describe slopbox commit (POST /commit).
type CommitOptions struct {
	// Container is the sandbox (name or id).
	Container string
	// Name tags the image; empty: untagged.
	Name string
	// Changes are Dockerfile instructions applied to the config: CMD,
	// ENTRYPOINT, ENV, WORKDIR, USER, LABEL, EXPOSE, VOLUME, STOPSIGNAL.
	Changes         []string
	Comment, Author string
	// NoPause commits a running sandbox without pausing it.
	NoPause bool
}

// Commit stores what the sandbox wrote to its root filesystem as a layer
// over its image (image.Store.CommitDir, the layer writer builds use) and
// writes the image: the sandbox's image config, its command as CMD (as
// docker commit), then Changes.
func Commit(ctx context.Context, b *sandbox.Backend, o CommitOptions) (*Result, error) {
	if o.Name != "" {
		if _, err := b.Store().ParseReference(o.Name); err != nil {
			return nil, err
		}
	}
	changes, err := parseChanges(o.Changes)
	if err != nil {
		return nil, err
	}
	sb, err := b.Open(o.Container)
	if err != nil {
		return nil, err
	}
	store := b.Store()
	img, err := store.Get(sb.ImageID())
	if err != nil {
		return nil, fmt.Errorf("commit %s: its image: %w", o.Container, err)
	}
	base, err := store.ManifestLayers(img.Digest)
	if err != nil {
		return nil, err
	}
	cfg := img.Config.DeepCopy()
	if cmd := sb.Info().Command; len(cmd) > 0 {
		cfg.Config.Cmd = slices.Clone(cmd)
	}
	// Docker's container_config: the container's config, its image as
	// Docker names it.
	cc := img.Config.DeepCopy().Config
	cc.Cmd, cc.Image, cc.Hostname = slices.Clone(sb.Info().Command), image.DockerName(sb.Info().Image), sb.Info().Hostname

	if err := applyChanges(&cfg.Config, changes); err != nil {
		return nil, err
	}
	var nl image.NewLayer
	err = sb.WithUpperDir(o.NoPause, func(upper string) error {
		nl, err = store.CommitDir(ctx, upper, "")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", o.Container, err)
	}
	cfg.Created = v1.Time{Time: image.Now()}
	cfg.Container = sb.ID()
	if o.Author != "" {
		cfg.Author = o.Author
	}
	cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, nl.DiffID)
	cfg.History = append(slices.Clone(cfg.History), v1.History{Created: cfg.Created, CreatedBy: "slopbox commit " + o.Container, Author: o.Author, Comment: o.Comment})
	var names []string
	if o.Name != "" {
		names = []string{o.Name}
	}
	dgst, err := store.WriteDerived(cfg, base, []image.NewLayer{nl}, names, img.ID, &cc)
	if err != nil {
		return nil, err
	}
	out, err := store.Get(dgst)
	if err != nil {
		return nil, err
	}
	return &Result{ID: out.ID, Digest: dgst, Tags: names}, nil
}

// ApplyChanges applies docker commit's and docker import's --change lines
// to cfg: Dockerfile instructions read by BuildKit's parser, as a build
// reads them (ENV A="b c" is one value, a second ENV of a name replaces
// the first), CMD, ENTRYPOINT, ENV, EXPOSE, LABEL, STOPSIGNAL, USER,
// VOLUME and WORKDIR; any other is refused before anything changes.
func ApplyChanges(cfg *v1.Config, lines []string) error {
	changes, err := parseChanges(lines)
	if err != nil {
		return err
	}
	out := cfg.DeepCopy()
	if err := applyChanges(out, changes); err != nil {
		return err
	}
	*cfg = *out
	return nil
}

// applyChanges applies parsed --change instructions to cfg in order, each
// one's words expanded against the environment as it is by then (ENV
// B=$A), quotes removed, as a Dockerfile's and dockerd's commit do.
func applyChanges(cfg *v1.Config, changes []instructions.Command) error {
	bl := &Builder{lex: shell.NewLex('\\')}
	for _, c := range changes {
		if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
			env := cfg.Env
			if err := e.Expand(func(w string) (string, error) { return bl.expand(w, env) }); err != nil {
				return fmt.Errorf("%w: --change %v: %v", backend.ErrInvalidValue, c, err)
			}
		}
		applyChange(cfg, c)
	}
	return nil
}

// parseChanges parses docker commit's --change lines as Dockerfile
// instructions, refusing those that are not configuration.
func parseChanges(lines []string) ([]instructions.Command, error) {
	var out []instructions.Command
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		res, err := parser.Parse(strings.NewReader(l + "\n"))
		if err != nil {
			return nil, fmt.Errorf("%w: --change %q: %v", backend.ErrInvalidValue, l, err)
		}
		for _, n := range res.AST.Children {
			c, err := instructions.ParseCommand(n)
			if err != nil {
				return nil, fmt.Errorf("%w: --change %q: %v", backend.ErrInvalidValue, l, err)
			}
			switch c.(type) {
			case *instructions.CmdCommand, *instructions.EntrypointCommand, *instructions.EnvCommand, *instructions.WorkdirCommand,
				*instructions.UserCommand, *instructions.LabelCommand, *instructions.ExposeCommand, *instructions.VolumeCommand,
				*instructions.StopSignalCommand:
				out = append(out, c)
			default:
				return nil, fmt.Errorf("%w: --change %q: %s cannot be changed by commit or import (CMD, ENTRYPOINT, ENV, EXPOSE, LABEL, STOPSIGNAL, USER, VOLUME and WORKDIR can)", backend.ErrInvalidValue, l, strings.ToUpper(c.Name()))
			}
		}
	}
	return out, nil
}

// applyChange applies one parsed configuration instruction to cc: a
// --change, or a Dockerfile's (build.go, where CMD and ENTRYPOINT follow
// SHELL). Shell forms run through /bin/sh -c, as docker commit's do.
func applyChange(cc *v1.Config, c instructions.Command) {
	argv := func(l instructions.ShellDependantCmdLine) []string {
		if l.PrependShell {
			return []string{"/bin/sh", "-c", strings.Join(l.CmdLine, " ")}
		}
		return slices.Clone(l.CmdLine)
	}
	switch c := c.(type) {
	case *instructions.CmdCommand:
		cc.Cmd = argv(c.ShellDependantCmdLine)
	case *instructions.EntrypointCommand:
		cc.Entrypoint = argv(c.ShellDependantCmdLine)
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			cc.Env = setEnv(cc.Env, kv.Key, kv.Value)
		}
	case *instructions.WorkdirCommand:
		p := c.Path
		if !path.IsAbs(p) {
			p = path.Join("/", cc.WorkingDir, p)
		}
		cc.WorkingDir = path.Clean(p)
	case *instructions.UserCommand:
		cc.User = c.User
	case *instructions.LabelCommand:
		if cc.Labels == nil {
			cc.Labels = map[string]string{}
		}
		for _, kv := range c.Labels {
			cc.Labels[kv.Key] = kv.Value
		}
	case *instructions.ExposeCommand:
		if cc.ExposedPorts == nil {
			cc.ExposedPorts = map[string]struct{}{}
		}
		for _, p := range c.Ports {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			cc.ExposedPorts[p] = struct{}{}
		}
	case *instructions.VolumeCommand:
		if cc.Volumes == nil {
			cc.Volumes = map[string]struct{}{}
		}
		for _, v := range c.Volumes {
			cc.Volumes[v] = struct{}{}
		}
	case *instructions.StopSignalCommand:
		cc.StopSignal = c.Signal
	}
}
