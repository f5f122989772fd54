package service

import (
	"fmt"
	"strconv"
	"time"

	"github.com/containerd/errdefs"

	"github.com/slopbox/slopbox/dockercompat/filters"
)

// LogWindow reads the tail, since and until of `slopbox logs` and of the
// Engine API's GET /containers/{id}/logs, the one reading both take:
//   - tail: "" or "all" is every line; a count is that many from the end;
//     a negative count is every line, as dockerd reads it (moby's
//     daemon/logs.go); anything else is refused (dockerd shows all).
//   - since, until: "" or "0" is no bound; else a duration before now
//     (10m), Unix seconds with a fraction (what the docker CLI sends) or a
//     date and time, as filters.Timestamp (moby's timetypes.GetTimestamp).
func LogWindow(tail, since, until string, now time.Time) (LogOptions, error) {
	o := LogOptions{Tail: -1}
	if tail != "" && tail != "all" {
		n, err := strconv.Atoi(tail)
		if err != nil {
			return o, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid tail %q: want a number of lines or \"all\"", tail))
		}
		o.Tail = max(n, -1)
	}
	for _, b := range []struct {
		name, v string
		to      *time.Time
	}{{"since", since, &o.Since}, {"until", until, &o.Until}} {
		if b.v == "" || b.v == "0" {
			continue
		}
		t, err := filters.Timestamp(b.v, now)
		if err != nil {
			return o, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid %s %q: %v", b.name, b.v, err))
		}
		*b.to = t
	}
	return o, nil
}
