package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/image"
)

// CreateRequest is docker create: the spec its options translate to
// (CreateOptions.ToSpawnSpec), the options themselves (kept for inspect
// and the restart policy), the image they run, and how its main command
// is attached when it starts.
type CreateRequest struct {
	Spec    backend.SpawnSpec
	Options dockercompat.CreateOptions
	Image   *image.Image
	Detach  DetachOptions
}

// CreateResult is the container made, with the warnings Docker gives
// back: the limits this host cannot enforce.
type CreateResult struct {
	Container *Container
	Warnings  []string
}

// CreateContainer is docker create, for the CLI and the Engine API alike:
// the container is recorded with its main command (the options' over the
// image's), how it attaches and its create options, or not at all (a
// failure half-way removes it).
func (s *Service) CreateContainer(ctx context.Context, r CreateRequest) (*CreateResult, error) {
	if r.Image == nil || r.Image.Config == nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage("create: no image given")
	}
	cfg := r.Image.Config.Config
	cmd := r.Options.Command(cfg.Entrypoint, cfg.Cmd)
	if len(cmd) == 0 {
		return nil, errdefs.ErrInvalidArgument.WithMessage("no command specified")
	}
	sb, err := s.b.Create(ctx, r.Spec, cmd)
	if err != nil {
		if errors.Is(err, ErrNameInUse) {
			return nil, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Conflict. The container name %q is already in use by another container. You have to remove (or rename) that container to be able to reuse that name.", "/"+r.Spec.Name))
		}
		return nil, err
	}
	if r.Detach != (DetachOptions{}) {
		if err := sb.SetDetachOptions(r.Detach); err != nil {
			sb.Remove()
			return nil, err
		}
	}
	if err := r.Options.SaveCreated(sb.Info().StateDir, cfg); err != nil {
		sb.Remove()
		return nil, err
	}
	res := &CreateResult{Container: &Container{sb: sb}, Warnings: []string{}}
	for _, l := range sb.Unenforced() {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the %s limit cannot be enforced on this host: limitation discarded (see `slopbox doctor`)", l))
	}
	return res, nil
}
