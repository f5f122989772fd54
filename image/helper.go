package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/internal/userns"
)

// helperName is the re-exec handler that performs store writes inside the
// user namespace.
const helperName = "image-store"

func init() { reexec.Register(helperName, helperMain) }

type helperRequest struct {
	Op       string        `json:"op"` // pull, load, gc
	Root     string        `json:"root"`
	Ref      string        `json:"ref,omitempty"`
	Path     string        `json:"path,omitempty"`
	FD       int           `json:"fd,omitempty"`       // an open archive passed to the child
	Key      string        `json:"key,omitempty"`      // id mapping variant (extract), cache key (commit-*)
	Parents  []string      `json:"parents,omitempty"`  // diffIDs, for commit-tar and export-paths
	Patterns []string      `json:"patterns,omitempty"` // for export-paths
	Layer    *NewLayer     `json:"layer,omitempty"`    // for put-cache and put-cache-marks
	Keys     []string      `json:"keys,omitempty"`     // for put-cache-marks
	Insecure []string      `json:"insecure,omitempty"`
	Progress Progress      `json:"progress"`
	Stall    time.Duration `json:"stall,omitempty"`
}

type helperResponse struct {
	Error    string        `json:"error,omitempty"`
	Kind     string        `json:"kind,omitempty"` // sentinel name, so errors.Is survives the process boundary
	Names    []string      `json:"names,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
	Layer    *NewLayer     `json:"layer,omitempty"`
	Matches  []ExportMatch `json:"matches,omitempty"`
}

var sentinels = map[string]error{
	"not-found": ErrNotFound, "bad-ref": ErrBadRef, "unauthorized": ErrUnauthorized, "bad-archive": ErrBadArchive, "insecure": ErrInsecure,
	"too-large": ErrTooLarge,
}

// runHelper performs req in a child inside the user namespace.
func (s *Store) runHelper(ctx context.Context, req helperRequest) error {
	_, err := s.runHelperNames(ctx, req, nil)
	return err
}

func (s *Store) runHelperNames(ctx context.Context, req helperRequest, file *os.File) ([]string, error) {
	resp, err := s.runHelperResp(ctx, req, file)
	if err != nil {
		return nil, err
	}
	return resp.Names, nil
}

func (s *Store) runHelperResp(ctx context.Context, req helperRequest, file *os.File) (*helperResponse, error) {
	req.Root = s.root
	req.Progress = s.progress
	req.Stall = s.stall
	for r := range s.insecure {
		req.Insecure = append(req.Insecure, r)
	}
	slices.Sort(req.Insecure)
	if se := s.sessionFor(&req); se != nil {
		resp, sent, err := se.call(ctx, req, file)
		if err == nil || sent {
			return checkHelperResp(resp, err)
		}
		// The session's helper was gone before it had the request: one
		// of its own.
	}
	in, _ := json.Marshal(req)
	cmd := userns.Command(nil)
	cmd.Env = append(cmd.Env, reexec.Env+"="+helperName)
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout = bytes.NewReader(in), &out
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{logW} // fd 4 in the child (fd 3: userns.Start's sync pipe, or closed)
	if file != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, file) // fd 5
	}
	if err := userns.Start(cmd, s.mapping); err != nil {
		logR.Close()
		logW.Close()
		return nil, err
	}
	logW.Close()
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		b, _ := io.ReadAll(logR)
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if line != "" {
				s.logf("%s", line)
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGTERM) })
	werr := cmd.Wait()
	stop()
	<-logDone
	logR.Close()
	var resp helperResponse
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("image store helper failed: %v", werr)
	}
	return checkHelperResp(&resp, nil)
}

// checkHelperResp turns a helper's reply into the caller's error.
func checkHelperResp(resp *helperResponse, err error) (*helperResponse, error) {
	if err != nil {
		return nil, err
	}
	if resp.Error != "" {
		if se, ok := sentinels[resp.Kind]; ok {
			return nil, &helperError{msg: resp.Error, kind: se}
		}
		return nil, errors.New(resp.Error)
	}
	return resp, nil
}

type helperError struct {
	msg  string
	kind error
}

func (e *helperError) Error() string { return e.msg }
func (e *helperError) Unwrap() error { return e.kind }

// helperMain runs in the child: root of the user namespace.
func helperMain() int {
	var req helperRequest
	resp := helperResponse{}
	defer func() { json.NewEncoder(os.Stdout).Encode(&resp) }()
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		resp.Error = "image store helper: bad request: " + err.Error()
		return 1
	}
	logs := os.NewFile(4, "logs")
	if os.Getenv("SLOPBOX_DEBUG") != "" {
		m, _ := os.ReadFile("/proc/self/uid_map")
		fmt.Fprintf(logs, "helper uid=%d euid=%d map=%q\n", os.Getuid(), os.Geteuid(), m)
	}
	s, err := Open(req.Root, WithInsecureRegistries(req.Insecure...), WithProgress(req.Progress), WithStallTimeout(req.Stall),
		WithLogger(func(f string, a ...any) { fmt.Fprintf(logs, f+"\n", a...) }))
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go cancelOnTerm(cancel)
		var file *os.File
		if req.FD != 0 {
			file = os.NewFile(uintptr(req.FD), req.Path)
		}
		err = serveHelper(ctx, s, req, file, &resp)
	}
	setHelperError(&resp, err)
	if err != nil {
		return 1
	}
	return 0
}

// serveHelper performs req inside the user namespace; file is the open
// file the request passes (req.FD), or nil.
func serveHelper(ctx context.Context, s *Store, req helperRequest, file *os.File, resp *helperResponse) error {
	var err error
	switch req.Op {
	case "pull":
		r, perr := s.ParseReference(req.Ref)
		if err = perr; err == nil {
			err = s.pullInside(ctx, r)
		}
	case "load":
		if file != nil {
			resp.Names, err = s.loadInside(ctx, req.Path, file)
		} else {
			resp.Names, err = s.loadInside(ctx, req.Path)
		}
	case "gc":
		err = s.gcInside()
	case "extract":
		err = s.extractInside(ctx, req.Ref, req.Key)
	case "commit-dir", "commit-tar":
		var nl NewLayer
		if req.Op == "commit-dir" {
			nl, err = s.commitDirInside(ctx, req.Path, req.Key)
		} else if file == nil {
			err = errors.New("no tar passed")
		} else {
			nl, err = s.commitTarInside(ctx, req.Parents, file, req.Key)
		}
		if err == nil {
			// A zero layer does not survive JSON (its hashes are ":"),
			// and would hide err from the caller.
			resp.Layer = &nl
		}
	case "put-cache", "put-cache-marks":
		switch {
		case req.Layer == nil:
			err = errors.New("no layer")
		case req.Op == "put-cache":
			err = s.PutCache(ctx, req.Key, *req.Layer)
		default:
			err = s.PutCacheMarks(ctx, req.Key, *req.Layer, req.Keys)
		}
	case "export-paths":
		if file == nil {
			return errors.New("no output passed")
		}
		// A temporary file of the caller's (COPY --from's): the holes of
		// the sparse files it holds are kept.
		sw := sparse.NewWriter(file)
		if resp.Matches, err = s.exportPathsInside(ctx, req.Parents, req.Patterns, sw); err == nil {
			err = sw.Close()
		}
		file.Close()
	default:
		err = fmt.Errorf("unknown operation %q", req.Op)
	}
	return err
}

// setHelperError puts err, if any, in resp, with its sentinel's name.
func setHelperError(resp *helperResponse, err error) {
	if err == nil {
		return
	}
	resp.Error = err.Error()
	for k, se := range sentinels {
		if errors.Is(err, se) {
			resp.Kind = k
		}
	}
}

// cancelOnTerm cancels the helper's work when the parent gives up, so that
// staging files are removed before exit.
func cancelOnTerm(cancel func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
	cancel()
}
