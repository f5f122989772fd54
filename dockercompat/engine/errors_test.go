package engine

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat/networks"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/netd"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox"
)

// TestStatusOfClasses pins Docker's status for each package's errors,
// wrapped as callers wrap them, now that the status comes from their
// class alone (the list statusOf once held, and the cases the handlers
// mapped on their own).
func TestStatusOfClasses(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{sandbox.ErrNotFound, http.StatusNotFound},
		{image.ErrNotFound, http.StatusNotFound},
		{sandbox.ErrVolumeNotFound, http.StatusNotFound},
		{networks.ErrNotFound, http.StatusNotFound},
		{netd.ErrNotFound, http.StatusNotFound},
		{backend.ErrClosed, http.StatusNotFound},
		{networks.ErrForbidden, http.StatusForbidden},
		{netd.ErrOverlap, http.StatusForbidden},
		{sandbox.ErrReadOnlyMount, http.StatusForbidden},
		{sandbox.ErrNameInUse, http.StatusConflict},
		{sandbox.ErrVolumeInUse, http.StatusConflict},
		{networks.ErrConflict, http.StatusConflict},
		{image.ErrInUse, http.StatusConflict},
		{sandbox.ErrPaused, http.StatusConflict},
		{sandbox.ErrNotMounted, http.StatusConflict},
		{sandbox.ErrNoMainCommand, http.StatusConflict},
		{backend.ErrUnsafe, http.StatusBadRequest},
		{image.ErrTooLarge, http.StatusBadRequest},
		{image.ErrBadRef, http.StatusBadRequest},
		{image.ErrBadArchive, http.StatusBadRequest},
		{oci.ErrBadMount, http.StatusBadRequest},
		{oci.ErrMountNotAllowed, http.StatusBadRequest},
		{oci.ErrMountInWorkdir, http.StatusBadRequest},
		{errBadRequest, http.StatusBadRequest},
		{backend.ErrInvalidValue, http.StatusBadRequest},
		{backend.InvalidValue("x %d", 1), http.StatusBadRequest},
		{backend.ErrInvalidLimit, http.StatusBadRequest},
		{(&backend.Limits{MemoryBytes: -1}).Validate(), http.StatusBadRequest},
		{backend.ErrInvalidTimeout, http.StatusBadRequest},
		{backend.ErrUnmappedUser, http.StatusBadRequest},
		{sandbox.ErrVolumeName, http.StatusBadRequest},
		{errNotImplemented, http.StatusNotImplemented},
		{networks.ErrNotImplemented, http.StatusNotImplemented},
		{sandbox.ErrNoNetHelper, http.StatusServiceUnavailable},
		{image.ErrStalled, http.StatusServiceUnavailable},
		{classedAs(sandbox.ErrVolumeNotFound, "get v: no such volume"), http.StatusNotFound},
		{errors.New("something else"), http.StatusInternalServerError},
	} {
		wrapped := fmt.Errorf("doing it: %w", c.err)
		if got := statusOf(wrapped); got != c.want {
			t.Errorf("statusOf(%q) = %d, want %d", wrapped, got, c.want)
		}
	}
	// Two sentinels of one class stay apart.
	if errors.Is(fmt.Errorf("x: %w", sandbox.ErrNotFound), image.ErrNotFound) {
		t.Error("sandbox.ErrNotFound matches image.ErrNotFound")
	}
	if !errors.Is(fmt.Errorf("x: %w", sandbox.ErrNotFound), sandbox.ErrNotFound) {
		t.Error("a wrapped sandbox.ErrNotFound does not match itself")
	}
	if got := sandbox.ErrNotFound.Error(); got != "no such sandbox" {
		t.Errorf("sandbox.ErrNotFound says %q: a class must not change a sentinel's words", got)
	}
}
