package engine

import (
	"net/http"

	"github.com/containerd/errdefs"
)

// Every error slopbox's packages return carries a class, containerd's
// errdefs (test/fences checks that no exported sentinel is made without
// one); the HTTP status is that class's, here and nowhere else. The
// engine's own refusals are errdefs classes with Docker's wording.

// statusOf is the status Docker answers for err's class: the mapping of
// moby's api/server/httpstatus, with containerd's classes that moby has
// no name for folded in (failed precondition is Docker's 409 for a
// container in the wrong state; resource exhausted is a copy over its
// budget).
func statusOf(err error) int {
	switch {
	case errdefs.IsNotFound(err):
		return http.StatusNotFound
	case errdefs.IsInvalidArgument(err):
		return http.StatusBadRequest
	case errdefs.IsConflict(err), errdefs.IsAlreadyExists(err), errdefs.IsFailedPrecondition(err):
		return http.StatusConflict
	case errdefs.IsPermissionDenied(err):
		return http.StatusForbidden
	case errdefs.IsUnauthorized(err):
		return http.StatusUnauthorized
	case errdefs.IsNotModified(err):
		return http.StatusNotModified
	case errdefs.IsNotImplemented(err):
		return http.StatusNotImplemented
	case errdefs.IsUnavailable(err):
		return http.StatusServiceUnavailable
	case errdefs.IsResourceExhausted(err):
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

var (
	errBadRequest     = errdefs.ErrInvalidArgument.WithMessage("bad request")
	errNotImplemented = errdefs.ErrNotImplemented.WithMessage("not implemented")
)

// reworded is an error of class's class with a message of its own.
type reworded struct {
	msg   string
	class error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.class }

// classedAs is msg with class's class (class may be any classed error, or
// an errdefs class itself).
func classedAs(class error, msg string) error { return &reworded{msg, class} }

// fail writes err with the status of its class.
func fail(w http.ResponseWriter, err error) {
	writeError(w, statusOf(err), err.Error())
}

// writeError writes Docker's error body. The docker CLI parses it only when
// the Content-Type is exactly application/json. Only fail calls it: a
// status comes from a class.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}
