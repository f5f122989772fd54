package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	mobybuild "github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/imagebuild"
)

// imageBuild is POST /build, docker's classic builder over HTTP: the body
// is the context (a tar, maybe compressed, or a bare Dockerfile), the
// answer a stream of JSON messages ({"stream": …} lines, {"aux": {"ID":
// …}}, "Successfully built/tagged"). A failure before the first message is
// an HTTP error; after it, the stream's last message (errorDetail), as
// moby does.
func (s *Server) imageBuild(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	if q.Get("remote") != "" {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("remote build contexts (remote="+q.Get("remote")+") are not supported by slopbox: send the context as the request body"))
		return
	}
	if v := q.Get("version"); v == "2" {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("BuildKit (version=2) is not supported by slopbox: use the classic builder (DOCKER_BUILDKIT=0)"))
		return
	}
	o := imagebuild.Options{Dockerfile: q.Get("dockerfile"), Target: q.Get("target"), NoCache: boolParam(r, "nocache"),
		Pull: q.Get("pull") != "" && q.Get("pull") != "0" && !strings.EqualFold(q.Get("pull"), "false"), Network: q.Get("networkmode")}
	if o.Network == "default" {
		o.Network = ""
	}
	for _, t := range q["t"] {
		if _, err := s.b.Store().ParseReference(t); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid tag %q: %v", t, err)))
			return
		}
		o.Tags = append(o.Tags, withLatest(t))
	}
	if v := q.Get("buildargs"); v != "" {
		var args map[string]*string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("buildargs: not a JSON object of strings: "+err.Error()))
			return
		}
		o.BuildArgs = map[string]string{}
		for k, v := range args {
			if v != nil {
				o.BuildArgs[k] = *v
			}
		}
	}
	if v := q.Get("cachefrom"); v != "" {
		if err := json.Unmarshal([]byte(v), &o.CacheFrom); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("cachefrom: not a JSON array of strings: "+err.Error()))
			return
		}
	}
	// docker-py repeats extrahosts=NAME:IP; a comma-separated list too.
	for _, v := range q["extrahosts"] {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.ExtraHosts = append(o.ExtraHosts, h)
			}
		}
	}
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &o.Labels); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("labels: not a JSON object of strings: "+err.Error()))
			return
		}
	}
	dir, df, remove, err := imagebuild.ContextFromTar(r.Body)
	if err != nil {
		fail(w, errdefs.ErrInvalidArgument.WithMessage(err.Error()))
		return
	}
	defer remove()
	o.ContextDir, o.DockerfileContent = dir, df

	sw := &buildStream{w: w}
	if !boolParam(r, "q") {
		o.Out = sw
		o.Err = errStream{sw}
	}
	res, err := s.b.Builder().Build(r.Context(), o)
	if err != nil {
		msg, code := err.Error(), 0
		var se *imagebuild.StepError
		if errors.As(err, &se) && se.ExitCode != 0 {
			msg, code = se.Err.Error(), se.ExitCode
		}
		if !sw.started() {
			if statusOf(err) == http.StatusInternalServerError && se == nil {
				fail(w, errdefs.ErrInvalidArgument.WithMessage(msg)) // the Dockerfile or the options
				return
			}
			fail(w, classedAs(err, msg))
			return
		}
		sw.message(errorMessage(msg, code))
		return
	}
	s.events.emit("image", "build", res.ID, nil)
	sw.message(streamMessage{Aux: mobybuild.Result{ID: res.ID}})
	if boolParam(r, "q") {
		sw.message(streamMessage{Stream: res.ID + "\n"})
		return
	}
	sw.message(streamMessage{Stream: "Successfully built " + strings.TrimPrefix(res.ID, "sha256:")[:12] + "\n"})
	for _, t := range res.Tags {
		sw.message(streamMessage{Stream: "Successfully tagged " + t + "\n"})
	}
}

// withLatest is a tag as docker prints it: :latest added to a name
// without a tag or digest.
func withLatest(ref string) string {
	if strings.Contains(ref, "@") || strings.LastIndex(ref, ":") > strings.LastIndex(ref, "/") {
		return ref
	}
	return ref + ":latest"
}

// buildStream writes the JSON messages of a build, each ended by \r\n and
// flushed; the status line goes out with the first.
type buildStream struct {
	w    http.ResponseWriter
	mu   sync.Mutex
	sent bool
}

func (b *buildStream) started() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent
}

func (b *buildStream) message(v streamMessage) {
	raw, _ := json.Marshal(v)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sent {
		b.w.Header().Set("Content-Type", "application/json")
		b.w.WriteHeader(http.StatusOK)
		b.sent = true
	}
	b.w.Write(append(raw, '\r', '\n'))
	if f, ok := b.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Write sends p as one {"stream": …} message.
func (b *buildStream) Write(p []byte) (int, error) {
	b.message(streamMessage{Stream: string(p)})
	return len(p), nil
}

// errStream is RUN's standard error, coloured as the classic builder does.
type errStream struct{ b *buildStream }

func (e errStream) Write(p []byte) (int, error) {
	e.b.message(streamMessage{Stream: "\x1b[91m" + string(p) + "\x1b[0m"})
	return len(p), nil
}

// imageCommit is POST /commit?container=&repo=&tag=&changes=&comment=&author=&pause=:
// the container's changes as an image; 201 {"Id": …}.
func (s *Server) imageCommit(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	o := imagebuild.CommitOptions{Container: q.Get("container"), Comment: q.Get("comment"), Author: q.Get("author"),
		NoPause: q.Has("pause") && !boolParam(r, "pause")}
	if o.Container == "" {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("container is required"))
		return
	}
	if repo := q.Get("repo"); repo != "" {
		o.Name = repo
		if t := q.Get("tag"); t != "" {
			o.Name += ":" + t
		}
	}
	// docker-py sends each change as its own changes=; the docker CLI
	// joins them with newlines.
	for _, c := range q["changes"] {
		o.Changes = append(o.Changes, strings.Split(c, "\n")...)
	}
	res, err := s.b.Commit(r.Context(), o)
	if err != nil {
		fail(w, err)
		return
	}
	s.events.emit("container", "commit", o.Container, map[string]string{"comment": o.Comment})
	writeJSON(w, http.StatusCreated, map[string]string{"Id": res.ID})
}

// imagePush is POST /images/{name}/push?tag=: docker's push stream
// (Pushing with progressDetail per layer, Pushed, the digest line and
// aux), an error after the head as its last message. Credentials are the
// server user's (its docker config), not X-Registry-Auth.
func (s *Server) imagePush(w http.ResponseWriter, r *request, name string) {
	ref := name
	if t := r.URL.Query().Get("tag"); t != "" {
		ref += ":" + t
	}
	if _, err := s.b.Store().Get(ref); err != nil {
		s.imageError(w, ref, err)
		return
	}
	sw := &buildStream{w: w}
	repo := ref
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	sw.message(streamMessage{Status: "The push refers to repository [" + repo + "]"})
	dgst, err := s.b.Store().Push(r.Context(), ref, "", func(u image.PushUpdate) {
		if u.Done {
			sw.message(streamMessage{Status: "Pushed", Progress: &jsonstream.Progress{}, ID: u.Layer})
			return
		}
		sw.message(streamMessage{Status: "Pushing", Progress: &jsonstream.Progress{Current: u.Complete, Total: u.Total}, ID: u.Layer})
	})
	if err != nil {
		sw.message(errorMessage(err.Error(), 0))
		return
	}
	s.events.emit("image", "push", ref, nil)
	sw.message(streamMessage{Status: tagOf(ref) + ": digest: " + dgst})
	sw.message(streamMessage{Progress: &jsonstream.Progress{}, Aux: pushResult{Tag: tagOf(ref), Digest: dgst}})
}
