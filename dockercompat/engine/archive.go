package engine

import (
	"archive/tar"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// containerArchive is docker cp's endpoint: HEAD and GET
// /containers/{id}/archive?path=P answer X-Docker-Container-Path-Stat (the
// base64 JSON of name, size, mode as a Go FileMode, mtime, linkTarget),
// GET with a tar of P (of P/.: P itself as ./ and its contents under ./,
// so that the client's copy to a new name creates it); PUT extracts a tar into the directory P. The
// sandbox's side runs inside the sandbox, as slopbox cp's does; a created
// or stopped container's files are read on the host through its layers
// or the sources of its mounts (Sandbox.ReadFiles), and written below its
// mounts only (Sandbox.WriteFiles).
func (s *Server) containerArchive(w http.ResponseWriter, r *request, sb *service.Container) {
	p := r.URL.Query().Get("path")
	if p == "" {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("path is required"))
		return
	}
	switch r.Method {
	case http.MethodPut:
		s.archivePut(w, r, sb, p)
	case http.MethodHead, http.MethodGet:
		s.archiveGet(w, r, sb, p)
	default:
		fail(w, errdefs.ErrNotFound.WithMessage("page not found: "+r.Method+" archive"))
	}
}

// archivePut is PUT /containers/{id}/archive: the tar in the body
// extracted at p.
func (s *Server) archivePut(w http.ResponseWriter, r *request, sb *service.Container, p string) {
	running := sb.Running()
	// Docker takes the tar compressed too (testcontainers' gzip).
	body, done, err := decompressStream(r.Body)
	if err != nil {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("the archive: "+err.Error()))
		return
	}
	defer done()
	if running {
		err = sb.CopyIn(r.Context(), body, p, true)
	} else {
		// Created or stopped: below its mounts, written on the host
		// (Sandbox.WriteFiles); its own filesystem only while it runs.
		err = sb.WriteFiles(body, p)
	}
	// Not below a mount: conflict; a read-only one: permission
	// denied (their classes); a missing directory: not found; any
	// other: the archive's fault.
	switch {
	case err == nil:
	case statusOf(err) != http.StatusInternalServerError:
		fail(w, err)
		return
	case errors.Is(err, fs.ErrNotExist):
		fail(w, classedAs(errdefs.ErrNotFound, err.Error()))
		return
	default:
		fail(w, classedAs(errdefs.ErrInvalidArgument, err.Error()))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// archiveGet is GET and HEAD /containers/{id}/archive: p as a tar, its
// stat in the X-Docker-Container-Path-Stat header.
func (s *Server) archiveGet(w http.ResponseWriter, r *request, sb *service.Container, p string) {
	running := sb.Running()
	pr, pw := io.Pipe()
	if running {
		go func() { pw.CloseWithError(sb.CopyOut(r.Context(), p, pw)) }()
	} else {
		// Created or stopped: read on the host through its layers.
		go func() { pw.CloseWithError(sb.ReadFiles(p, pw)) }()
	}
	defer pr.Close()
	// The first entry of the tar is P itself (for P/., as dockerd: P
	// as ./, then ./ENTRY): its header is the stat.
	tr := tar.NewReader(pr)
	h, err := tr.Next()
	if err != nil {
		fail(w, errdefs.ErrNotFound.WithMessage("Could not find the file "+p+" in container "+sb.Name()))
		return
	}
	stat, err := pathStat(h)
	if err != nil {
		fail(w, err) // a time past year 9999, as dockerd's
		return
	}
	w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(stat))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	// The client writes a sparse file's holes out as zeros (the tar
	// holds them so): the files' apparent sizes are bounded
	// (Sandbox.CopyBound). A file past the bound is refused before its
	// header: as the first entry, with the bound named; later, by
	// ending the archive there, which the client reports.
	size := sb.CopyCounter()
	if h.Typeflag == tar.TypeReg {
		if err := size.Add(h.Name, h.Size); err != nil {
			fail(w, errdefs.ErrResourceExhausted.WithMessage("copy from "+sb.Name()+": the copy is "+err.Error()))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	// Written anew, as slopbox cp writes what it copies out: no
	// setuid or setgid bit reaches the client (docker cp as root
	// would otherwise make a sandbox's setuid file host root's).
	tw := tar.NewWriter(w)
	for first := true; err == nil; h, err = tr.Next() {
		if !first && h.Typeflag == tar.TypeReg {
			if serr := size.Add(h.Name, h.Size); serr != nil {
				if s.Log != nil {
					s.Log("archive of %s in %s cut short: %v", p, sb.Name(), serr)
				}
				return
			}
		}
		first = false
		h.Mode &^= 0o6000
		if tw.WriteHeader(h) != nil {
			return
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return
		}
	}
	if err == io.EOF {
		tw.Close()
	}
}

// pathStat is the stat header of the tar entry h: docker's PathStat, as
// JSON.
func pathStat(h *tar.Header) ([]byte, error) {
	mode := fs.FileMode(h.Mode & 0o777)
	switch h.Typeflag {
	case tar.TypeDir:
		mode |= fs.ModeDir
	case tar.TypeSymlink:
		mode |= fs.ModeSymlink
	}
	return json.Marshal(container.PathStat{Name: path.Base(h.Name), Size: h.Size, Mode: mode, Mtime: h.ModTime, LinkTarget: h.Linkname})
}
