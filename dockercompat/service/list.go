package service

import "github.com/slopbox/slopbox/dockercompat/filters"

// ListOptions are docker ps's: All shows stopped containers too (as a
// status or exited filter does, as Docker's), Filters are Docker's.
// Broken says whether a container whose state cannot be read is listed:
// the CLI lists it, so that its user sees it and removes it (rm -f); the
// Engine API does not, since a client takes every field of a listed
// container for granted.
type ListOptions struct {
	All     bool
	Filters filters.Args
	Broken  bool
}

// ListContainers is docker ps, for the CLI and the Engine API alike.
func (s *Service) ListContainers(o ListOptions) ([]Info, error) {
	list, err := s.b.List()
	if err != nil {
		return nil, err
	}
	match, err := Filter(o.Filters, list)
	if err != nil {
		return nil, err
	}
	shown := []Info{}
	for _, i := range list {
		if i.Broken != "" && !o.Broken || !o.All && !i.Running && !ListsStopped(o.Filters) || !match(i) {
			continue
		}
		shown = append(shown, i)
	}
	return shown, nil
}

// PruneReport is what docker container prune removed: the containers,
// and the space their writable layers held, measured before they went.
type PruneReport struct {
	Deleted        []string
	SpaceReclaimed int64
}

// PruneContainers is docker container prune: the containers that are not
// running and match Docker's prune filters (until=, label=) go.
func (s *Service) PruneContainers(f filters.Args) (PruneReport, error) {
	rep := PruneReport{Deleted: []string{}}
	match, err := PruneFilter(f)
	if err != nil {
		return rep, err
	}
	sizes := map[string]int64{}
	if list, err := s.b.List(); err == nil {
		for _, i := range list {
			if i.Running {
				continue
			}
			if sb, err := s.b.Open(i.ID); err == nil {
				sizes[i.ID] = sb.WritableSize()
			}
		}
	}
	removed, err := s.b.PruneMatching(false, match)
	rep.Deleted = append(rep.Deleted, removed...)
	for _, id := range removed {
		rep.SpaceReclaimed += sizes[id]
	}
	return rep, err
}
