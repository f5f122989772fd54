package service

import "github.com/slopbox/slopbox/dockercompat/filters"

// ListVolumes is docker volume ls: the volumes that match Docker's volume
// filters (name=, label=, dangling=, driver=).
func (s *Service) ListVolumes(f filters.Args) ([]Volume, error) {
	match, err := VolumeFilter(f, func(v Volume) int { return len(s.b.VolumeUsers(v)) })
	if err != nil {
		return nil, err
	}
	list, err := s.b.Volumes()
	if err != nil {
		return nil, err
	}
	out := []Volume{}
	for _, v := range list {
		if match(v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// PruneVolumes is docker volume prune: the volumes no container uses that
// match f go; only anonymous ones unless f's all=true or allByDefault
// (the CLI's --all, an API before 1.42). It returns the names removed.
func (s *Service) PruneVolumes(f filters.Args, allByDefault bool) ([]string, error) {
	match, err := VolumePruneFilter(f, allByDefault)
	if err != nil {
		return nil, err
	}
	removed, err := s.b.PruneVolumes(func(v Volume) bool { return !match(v) })
	if removed == nil {
		removed = []string{}
	}
	return removed, err
}
