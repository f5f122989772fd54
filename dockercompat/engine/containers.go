package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// strSlice is Docker's strslice: a JSON string or array of strings.
type strSlice []string

func (s *strSlice) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = strSlice{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*s = many
	return nil
}

// createBody is the part of POST /containers/create slopbox reads.
type createBody struct {
	Hostname     string
	User         string
	Env          []string
	Cmd          strSlice
	Entrypoint   *strSlice
	Image        string
	WorkingDir   string
	Labels       map[string]string
	Tty          bool
	OpenStdin    bool
	ExposedPorts map[string]struct{}
	Volumes      map[string]struct{} // anonymous volumes (docker -v /path)
	Healthcheck  *v1.HealthConfig
	MacAddress   string
	StopTimeout  *int
	StopSignal   string
	// NetworkingConfig.EndpointsConfig: the user networks, with aliases
	// and the address asked for (compose's project network).
	NetworkingConfig struct {
		EndpointsConfig map[string]*struct {
			Aliases    []string
			IPAMConfig *struct{ IPv4Address string }
		}
	}
	HostConfig struct {
		Binds  []string
		Mounts []struct {
			Type, Source, Target string
			ReadOnly             bool
			TmpfsOptions         *struct{ SizeBytes int64 }
		}
		Tmpfs                                  map[string]string
		NetworkMode                            string
		PortBindings                           map[string][]struct{ HostIp, HostPort string }
		Memory                                 int64
		NanoCpus                               int64
		CpuQuota, CpuPeriod                    int64
		CpuRealtimePeriod, CpuRealtimeRuntime  int64
		PidsLimit                              *int64
		AutoRemove                             bool
		ReadonlyRootfs                         bool
		Privileged                             bool
		CapAdd, CapDrop, SecurityOpt           []string
		PidMode, IpcMode, UTSMode, UsernsMode  string
		Devices                                []struct{ PathOnHost string }
		Init                                   *bool
		ConsoleSize                            []uint16 // [height, width] of a Tty (API 1.42)
		ExtraHosts, Dns, DnsSearch, DnsOptions []string
		GroupAdd                               []string
		RestartPolicy                          dockercompat.RestartPolicy
		LogConfig                              dockercompat.LogConfig
		CpuShares                              int64
		CpusetCpus, CpusetMems                 string
		Runtime, Isolation, VolumeDriver       string
		VolumesFrom, Links, DeviceCgroupRules  []string
		MemorySwap                             int64
		MemorySwappiness                       *int64
	}
}

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, a...))
}

// CreateOptions decodes the body of POST /containers/create into
// Docker's create options, as containerCreate does.
func (s *Server) CreateOptions(body io.Reader, name string) (dockercompat.CreateOptions, error) {
	var c createBody
	if err := json.NewDecoder(body).Decode(&c); err != nil {
		return dockercompat.CreateOptions{}, badRequest("invalid JSON in the request body: %v", err)
	}
	return s.options(&c, name)
}

// options turns a create body into the options of Docker's command line,
// as podman's compat handlers do, for the one translator the CLI uses too
// (dockercompat.CreateOptions.ToSpawnSpec).
func (s *Server) options(c *createBody, name string) (dockercompat.CreateOptions, error) {
	h := c.HostConfig
	o := dockercompat.CreateOptions{Name: name, Image: c.Image, User: c.User, Hostname: c.Hostname, Workdir: c.WorkingDir,
		Cmd: c.Cmd, Env: c.Env, Network: h.NetworkMode, Volumes: h.Binds, CPUs: float64(h.NanoCpus) / 1e9,
		AutoRemove: h.AutoRemove, ReadOnly: h.ReadonlyRootfs, CapAdd: h.CapAdd, CapDrop: h.CapDrop, SecurityOpt: h.SecurityOpt,
		ExtraHosts: h.ExtraHosts, DNS: h.Dns, DNSSearch: h.DnsSearch, DNSOptions: h.DnsOptions,
		GroupAdd: h.GroupAdd, RestartPolicy: h.RestartPolicy, LogConfig: h.LogConfig, CpuShares: h.CpuShares, Healthcheck: c.Healthcheck,
		CPURealtimePeriod: h.CpuRealtimePeriod, CPURealtimeRuntime: h.CpuRealtimeRuntime,
		AnonymousVolumes: slices.Sorted(maps.Keys(c.Volumes)),
		Echoed: dockercompat.Echoed{CpusetCpus: h.CpusetCpus, CpusetMems: h.CpusetMems, Runtime: h.Runtime, Isolation: h.Isolation,
			VolumeDriver: h.VolumeDriver, VolumesFrom: h.VolumesFrom, Init: h.Init, MemorySwap: h.MemorySwap,
			MemorySwappiness: h.MemorySwappiness, MacAddress: c.MacAddress, StopTimeout: c.StopTimeout, StopSignal: c.StopSignal, Links: h.Links},
		Lookup: service.Lookup(s.b)}
	for _, name := range slices.Sorted(maps.Keys(c.NetworkingConfig.EndpointsConfig)) {
		ep := c.NetworkingConfig.EndpointsConfig[name]
		a := backend.NetworkAttachment{Network: name}
		if ep != nil {
			a.Aliases = ep.Aliases
			if ep.IPAMConfig != nil {
				a.IPv4 = ep.IPAMConfig.IPv4Address
			}
		}
		if name == h.NetworkMode {
			// The mode's own endpoint goes first.
			o.Networks = append([]backend.NetworkAttachment{a}, o.Networks...)
		} else {
			o.Networks = append(o.Networks, a)
		}
	}
	// As dockerd: a name alone stays in Config.Env as given and is not
	// set in the process.
	o.Env = nil
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok && k != "" {
			o.EnvNames = append(o.EnvNames, kv)
			continue
		}
		o.Env = append(o.Env, kv)
	}
	if c.Entrypoint != nil {
		o.Entrypoint = append([]string{}, *c.Entrypoint...)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		o.Labels = append(o.Labels, k+"="+c.Labels[k])
	}
	var devices []string
	for _, d := range h.Devices {
		devices = append(devices, d.PathOnHost)
	}
	ipc := h.IpcMode
	if ipc == "shareable" {
		ipc = "" // the daemon's default: the sandbox's own
	}
	o.HostSharing = backend.HostSharing{Privileged: h.Privileged, Devices: devices, DeviceCgroupRules: h.DeviceCgroupRules, PidMode: h.PidMode, IpcMode: ipc, UTSMode: h.UTSMode, UsernsMode: h.UsernsMode}
	// "80/tcp": [{HostIp, HostPort}] (docker-py's ports={"80/tcp": 8080}
	// and -p): the container port is the key, as everywhere in this API.
	// An empty HostIp is 127.0.0.1, not Docker's every interface.
	for _, port := range slices.Sorted(maps.Keys(h.PortBindings)) {
		pm, err := dockercompat.ParsePort(port)
		if err != nil || pm.HostPort != 0 || pm.HostIP != "" {
			return o, badRequest("PortBindings key %q: want CONTAINERPORT/tcp or /udp", port)
		}
		for _, bind := range h.PortBindings[port] {
			p := fmt.Sprintf("%s:%d/%s", bind.HostPort, pm.ContainerPort, pm.Protocol)
			switch {
			case strings.Contains(bind.HostIp, ":"):
				p = "[" + bind.HostIp + "]:" + p
			case bind.HostIp != "":
				p = bind.HostIp + ":" + p
			}
			o.Publish = append(o.Publish, p)
		}
	}
	for _, m := range h.Mounts {
		mo := dockercompat.MountOption{Type: m.Type, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}
		if m.TmpfsOptions != nil && m.TmpfsOptions.SizeBytes > 0 {
			mo.TmpfsSize = strconv.FormatInt(m.TmpfsOptions.SizeBytes, 10)
		}
		o.Mounts = append(o.Mounts, mo)
	}
	for _, dst := range slices.Sorted(maps.Keys(h.Tmpfs)) {
		o.Tmpfs = append(o.Tmpfs, strings.TrimSuffix(dst+":"+h.Tmpfs[dst], ":"))
	}
	if h.Memory != 0 {
		o.Memory = strconv.FormatInt(h.Memory, 10)
	}
	if h.CpuQuota > 0 && h.CpuPeriod > 0 && o.CPUs == 0 {
		o.CPUs = float64(h.CpuQuota) / float64(h.CpuPeriod)
	}
	if h.PidsLimit != nil {
		o.PidsLimit = *h.PidsLimit
	}
	s.Policy.Apply(&o)
	return o, nil
}

// policyError names the server's policy file in an error it caused.
func (s *Server) policyError(err error) error {
	if s.Policy != nil && errors.Is(err, service.ErrMountNotAllowed) {
		return fmt.Errorf("%w (allowed_mount_roots of the policy %s)", err, s.Policy.File)
	}
	return err
}

func (s *Server) containerCreate(w http.ResponseWriter, r *request) {
	var c createBody
	if !decodeBody(w, r, &c) {
		return
	}
	if c.Image == "" {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("config.Image is required"))
		return
	}
	img, err := s.b.Store().Get(c.Image)
	if err != nil {
		s.imageError(w, c.Image, err)
		return
	}
	// Docker takes a name with its leading slash, as inspect shows it.
	opts, err := s.options(&c, strings.TrimPrefix(r.URL.Query().Get("name"), "/"))
	if err != nil {
		fail(w, err)
		return
	}
	spec, warnings, notes, err := opts.ToSpawnSpec()
	if err != nil {
		fail(w, s.policyError(err))
		return
	}
	for _, note := range notes {
		if s.Log != nil {
			s.Log("note: %s", note)
		}
	}
	var o service.DetachOptions
	if c.Tty || c.OpenStdin {
		o = service.DetachOptions{TTY: c.Tty, OpenStdin: c.OpenStdin}
		if cs := c.HostConfig.ConsoleSize; c.Tty && len(cs) == 2 && cs[0] > 0 && cs[1] > 0 {
			o.Rows, o.Cols = cs[0], cs[1]
		}
	}
	res, err := s.b.CreateContainer(r.Context(), service.CreateRequest{Spec: spec, Options: opts, Image: img, Detach: o})
	if err != nil {
		fail(w, s.policyError(err))
		return
	}
	sb := res.Container
	s.emitContainer("create", sb.Info(), nil)
	warnings = append(warnings, res.Warnings...)
	if warnings == nil {
		warnings = []string{}
	}
	writeJSON(w, http.StatusCreated, container.CreateResponse{ID: sb.ID(), Warnings: warnings})
}

// open finds container ref or answers 404 as Docker does.
func (s *Server) open(w http.ResponseWriter, ref string) *service.Container {
	sb, err := s.b.Open(ref)
	if err != nil {
		if errors.Is(err, service.ErrNotFound) {
			fail(w, errdefs.ErrNotFound.WithMessage("No such container: "+ref))
		} else {
			fail(w, err)
		}
		return nil
	}
	return sb
}

// containerStart is POST /containers/{id}/start.
func (s *Server) containerStart(w http.ResponseWriter, r *request, sb *service.Container) {
	if sb.Paused() {
		fail(w, errdefs.ErrConflict.WithMessage(fmt.Sprintf("cannot start a paused container %s, try unpause instead", r.PathValue("id"))))
		return
	}
	if sb.Running() {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// A start by hand: a pending restart is cancelled, restarts count
	// from 0. Then the last run's die, with its own code: start clears
	// its exit.
	sb, _, unlock, err := sb.StartByHand()
	defer unlock() // held over the start: a monitor ending the last run does not start it too
	if err != nil {
		fail(w, err)
		return
	}
	s.watchOf(sb.ID()).finish()
	sb = s.reopen(sb)
	if sb.Running() {
		// Its restart policy started it as this start came: started.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	base := sb.Info().FinishedAt
	as := s.attachedStart(sb.ID())
	err = sb.StartAttached(r.Context(), as)
	if as.Stdin != nil {
		as.Stdin.Close()
	}
	if err != nil {
		if sb.Info().AutoRemove {
			unlock()    // the removal takes it
			sb.Remove() // as the daemon: a --rm container that cannot start goes
		}
		var se *service.StartError
		if errors.As(err, &se) {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("failed to create task for container: "+se.Msg))
			return
		}
		fail(w, err)
		return
	}
	s.emitContainer("start", sb.Info(), nil)
	s.watchExit(sb, base)
	w.WriteHeader(http.StatusNoContent)
}

// containerStop is POST /containers/{id}/stop.
func (s *Server) containerStop(w http.ResponseWriter, r *request, sb *service.Container) {
	if !sb.Running() {
		// Not running: between runs of a restart policy, or its main
		// command ended a moment ago, before its watch saw it.
		cur, restarting, err := sb.StopByHand()
		switch {
		case err != nil:
			fail(w, err)
			return
		case restarting:
			// A restarting one: stopped, its watch done with it.
			s.watchOf(sb.ID()).finish()
			w.WriteHeader(http.StatusNoContent)
			return
		case !cur.Running():
			w.WriteHeader(http.StatusNotModified)
			return
		}
		sb = cur // its restart policy had started it again
	}
	if err := s.stop(r.Context(), sb, r.URL.Query().Get("t"), r.URL.Query().Get("signal")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// containerRestart is POST /containers/{id}/restart: a stop when it
// runs, then a start by hand.
func (s *Server) containerRestart(w http.ResponseWriter, r *request, sb *service.Container) {
	if err := sb.CheckRestart(); err != nil {
		fail(w, err)
		return
	}
	if sb.Running() {
		if err := s.stop(r.Context(), sb, r.URL.Query().Get("t"), r.URL.Query().Get("signal")); err != nil {
			fail(w, err)
			return
		}
	}
	// A start by hand: a pending restart is dropped and restarts count
	// from 0, as /start's. A restart of a container not running is only
	// a start, as Docker's (no die or stop); the last run's die first.
	cur, _, unlock, err := sb.StartByHand()
	defer unlock()
	if err != nil {
		fail(w, err)
		return
	}
	s.watchOf(sb.ID()).finish()
	sb = s.reopen(cur)
	base := sb.Info().FinishedAt
	as := s.attachedStart(sb.ID())
	err = sb.StartAttached(r.Context(), as)
	if as.Stdin != nil {
		as.Stdin.Close()
	}
	if err != nil {
		fail(w, err)
		return
	}
	s.emitContainer("start", sb.Info(), nil)
	s.watchExit(sb, base)
	s.emitContainer("restart", sb.Info(), nil)
	w.WriteHeader(http.StatusNoContent)
}

// containerKill is POST /containers/{id}/kill?signal=.
func (s *Server) containerKill(w http.ResponseWriter, r *request, sb *service.Container) {
	sig := syscall.SIGKILL
	if v := r.URL.Query().Get("signal"); v != "" {
		var err error
		if sig, err = backend.ParseSignal(v); err != nil {
			fail(w, err)
			return
		}
	}
	if !sb.Running() {
		if sb.Restarting() {
			// As dockerd's kill of a restarting container: its restart
			// is cancelled, and it stays stopped.
			if _, _, err := sb.StopByHand(); err != nil {
				fail(w, err)
				return
			}
			s.watchOf(sb.ID()).finish()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		fail(w, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Cannot kill container: %s: container %s is not running", r.PathValue("id"), sb.ID())))
		return
	}
	if sb.IsFatal(sig) {
		// A fatal signal stops it by hand: its restart policy does
		// not answer the exit.
		cur, _, err := sb.StopByHand()
		if err != nil {
			fail(w, err)
			return
		}
		sb = cur
	}
	watch := s.watchOf(sb.ID()) // before the signal: its die is the watch's
	// The kill event goes out before the signal, so that it always
	// comes before the die the signal causes (dockerd holds the
	// container's lock over both; its exit handler waits for it).
	s.emitContainer("kill", sb.Info(), map[string]string{"signal": strconv.Itoa(int(sig))})
	if err := sb.Signal(sig); err != nil {
		fail(w, err)
		return
	}
	if sig == syscall.SIGKILL {
		// As Docker's kill with SIGKILL: it returns once the exit is
		// recorded, so that a wait or inspect right after has its 137.
		watch.finish()
	}
	w.WriteHeader(http.StatusNoContent)
}

// containerRename is POST /containers/{id}/rename?name=.
func (s *Server) containerRename(w http.ResponseWriter, r *request, sb *service.Container) {
	if err := s.b.Rename(sb.ID(), strings.TrimPrefix(r.URL.Query().Get("name"), "/")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// containerChanges is GET /containers/{id}/changes.
func (s *Server) containerChanges(w http.ResponseWriter, _ *request, sb *service.Container) {
	ch, err := sb.Changes()
	if err != nil {
		fail(w, err)
		return
	}
	out := []container.FilesystemChange{}
	for _, c := range ch {
		out = append(out, container.FilesystemChange{Path: c.Path, Kind: container.ChangeType(c.Kind)})
	}
	writeJSON(w, http.StatusOK, out)
}

// containerExport is GET /containers/{id}/export: its root filesystem as
// a tar.
func (s *Server) containerExport(w http.ResponseWriter, _ *request, sb *service.Container) {
	lw := &lazyWriter{w: w, contentType: "application/x-tar"}
	if err := sb.Export(lw); err != nil && !lw.started {
		fail(w, err) // once the tar has begun, a failure can only cut it short
	}
}

// containerPause is POST /containers/{id}/pause and /unpause.
func (s *Server) containerPause(w http.ResponseWriter, r *request, sb *service.Container) {
	do := sb.Pause
	if strings.HasSuffix(r.URL.Path, "/unpause") {
		do = sb.Unpause
	}
	if err := do(); err != nil {
		if errors.Is(err, service.ErrPaused) || errors.Is(err, service.ErrNotPaused) || !sb.Running() {
			fail(w, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s: %v", r.PathValue("id"), err)))
			return
		}
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stop is docker stop: SIGTERM to the main command, SIGKILL for the whole
// sandbox after t seconds (10 by default) or at once when it has none.
func (s *Server) stop(ctx context.Context, sb *service.Container, t, signal string) error {
	var tp *int
	if t != "" {
		n, err := strconv.Atoi(t)
		if err != nil {
			return badRequest("invalid t=%q", t)
		}
		tp = &n
	}
	sig, grace, err := sb.StopPlan(signal, tp)
	if err != nil {
		return err
	}
	watch := s.watchOf(sb.ID()) // before the signal: its die is the watch's
	if _, err := sb.Stop(ctx, sig, grace); err != nil {
		return err
	}
	if now := s.watchOf(sb.ID()); now != nil {
		watch = now
	}
	switch {
	case !watch.finish():
		// A main command this server started has its die from its
		// watch; one started elsewhere (the slopbox CLI, an earlier
		// server) here.
		s.emitContainer("die", sb.Info(), nil)
	}
	s.emitContainer("stop", sb.Info(), nil)
	return nil
}

// linkRemove is DELETE /containers/{name}/{alias}?link=1: the link alias
// of container name goes from its HostConfig.Links (what the link put in
// its environment stays, as in Docker's).
func (s *Server) linkRemove(w http.ResponseWriter, r *request) {
	ref, alias := r.PathValue("id"), r.PathValue("alias")
	if !boolParam(r, "link") {
		notServed(w, r)
		return
	}
	if alias == "" {
		fail(w, errdefs.ErrConflict.WithMessage("Conflict, cannot remove the default link name of the container"))
		return
	}
	sb := s.open(w, ref)
	if sb == nil {
		return
	}
	found := false
	err := dockercompat.UpdateCreated(sb.Info().StateDir, func(c *dockercompat.CreateRecord) error {
		kept := c.Links[:0]
		for _, l := range c.Links {
			if _, a, err := dockercompat.ParseLink(l); err == nil && a == alias {
				found = true
				continue
			}
			kept = append(kept, l)
		}
		c.Links = kept
		return nil
	})
	switch {
	case err != nil:
		fail(w, err)
	case !found:
		fail(w, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("Could not find container for entity id /%s/%s", sb.Name(), alias)))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) containerRemove(w http.ResponseWriter, r *request) {
	if boolParam(r, "link") {
		s.linkRemove(w, r) // without an alias: refused
		return
	}
	sb := s.open(w, r.PathValue("id"))
	if sb == nil {
		return
	}
	if !sb.Running() {
		s.watchOf(sb.ID()).finish() // the die of a run that just ended first
	}
	if err := sb.CheckRemove(boolParam(r, "force")); err != nil {
		fail(w, err)
		return
	}
	// A restart waiting is cancelled; one that was starting it has.
	sb, _, err := sb.StopByHand()
	if err != nil {
		fail(w, err)
		return
	}
	if sb.Running() && len(sb.Info().Command) > 0 {
		sb.KeepRemovedExit(128 + int(syscall.SIGKILL)) // for a waiter, as Docker's 137
	}
	last := sb.Info() // for its destroy event
	watch := s.watchOf(sb.ID())
	if watch != nil {
		watch.removedByAPI.Store(true) // its destroy is reported here
	}
	if !sb.Running() {
		watch.finish() // its die with its exit code, which the removal takes
	}
	remove := sb.Remove
	if boolParam(r, "v") {
		remove = sb.RemoveWithVolumes // and its anonymous volumes
	}
	if err := remove(); err != nil && !errors.Is(err, service.ErrNotFound) {
		fail(w, err)
		return
	}
	watch.finish() // die before destroy, as Docker reports them
	s.emitContainer("destroy", last, nil)
	s.dropExecs()
	w.WriteHeader(http.StatusNoContent)
}

// containerWait is POST /containers/{id}/wait?condition=: not-running (the
// default) holds at once for a container that is not running (created:
// code 0, or exited: its last code) and else at its exit; next-exit holds
// at the next exit from now, even of a container not started yet (docker
// run without --rm sends it before start); removed holds when the
// container is gone (docker run --rm). The 200 header goes out as soon
// as the baseline (the last exit before the request) is taken, so that a
// client holding it knows what comes after counts; then the body, when
// the condition holds.
func (s *Server) containerWait(w http.ResponseWriter, r *request) {
	cond := r.URL.Query().Get("condition")
	switch cond {
	case "", service.WaitNotRunning, service.WaitNextExit, service.WaitRemoved:
	default:
		fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid condition: %q", cond)))
		return
	}
	sb := s.open(w, r.PathValue("id"))
	if sb == nil {
		return
	}
	id := sb.ID()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	// The one wait of the CLI and the API (Service.Wait).
	code, err := s.b.Wait(r.Context(), id, cond)
	if err != nil {
		return // the client went away
	}
	// As Docker: the die event goes out before the wait returns (a
	// client that follows events sees it by then), not at the watch's
	// next poll.
	s.watchOf(id).finish()
	json.NewEncoder(w).Encode(container.WaitResponse{StatusCode: int64(code)})
}

func (s *Server) containerLogs(w http.ResponseWriter, r *request, sb *service.Container) {
	q := r.URL.Query()
	o, err := service.LogWindow(q.Get("tail"), q.Get("since"), q.Get("until"), time.Now())
	if err != nil {
		fail(w, err)
		return
	}
	o.Follow, o.Timestamps = boolParam(r, "follow"), boolParam(r, "timestamps")
	tty := sb.Info().Tty
	if tty {
		w.Header().Set("Content-Type", "application/vnd.docker.raw-stream")
	} else {
		w.Header().Set("Content-Type", "application/vnd.docker.multiplexed-stream")
	}
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		// The headers go out now: a followed log may have no line for a
		// while, and the client waits for its response before reading.
		fl.Flush()
	}
	stdout, stderr := outputStreams(r, &flushWriter{w: w, f: fl}, tty)
	sb.Logs(r.Context(), o, stdout, stderr)
}

// outputStreams are the stdout and stderr an attach or logs request gets
// on w: raw with a terminal, else multiplexed frames; io.Discard for a
// stream its stdout/stderr parameter leaves out.
func outputStreams(r *request, w io.Writer, tty bool) (stdout, stderr io.Writer) {
	stdout, stderr = w, w
	if !tty {
		stdout, stderr = frames(w)
	}
	if !boolParam(r, "stdout") {
		stdout = io.Discard
	}
	if !boolParam(r, "stderr") {
		stderr = io.Discard
	}
	return stdout, stderr
}

func (s *Server) containerList(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	list, err := s.b.ListContainers(service.ListOptions{All: boolParam(r, "all"), Filters: f})
	if err != nil {
		fail(w, err)
		return
	}
	out := []containerSummary{}
	for _, i := range list {
		st := service.State(i)
		labels := i.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		c := containerSummary{
			ID: i.ID, Names: []string{"/" + i.Name}, Image: service.ImageName(i), ImageID: i.ImageID,
			Command: service.Command(i), Created: i.Created.Unix(), Ports: listPorts(i),
			Labels: labels, State: st, Status: service.Status(i), Mounts: []struct{}{},
		}
		c.HostConfig.NetworkMode = i.Network
		c.NetworkSettings.Networks = service.Networks(i)
		out = append(out, c)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) containerPrune(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	rep, err := s.b.PruneContainers(f)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, container.PruneReport{ContainersDeleted: rep.Deleted, SpaceReclaimed: uint64(rep.SpaceReclaimed)})
}

func (s *Server) containerTop(w http.ResponseWriter, _ *request, sb *service.Container) {
	procs, err := sb.Processes()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, service.Top(procs, time.Now()))
}

// containerStats is GET /containers/{id}/stats, one sample: with
// stream=false (docker stats --no-stream) and without one-shot, as the
// daemon does, it reads two samples apart, the first as precpu_stats, so
// that the client computes a CPU percentage.
func (s *Server) containerStats(w http.ResponseWriter, r *request, sb *service.Container) {
	sample := func() (cpuStats, service.Stats, error) {
		st, err := sb.Stats()
		c := cpuStats{SystemUsage: systemCPUUsage(), OnlineCPUs: uint32(runtime.NumCPU())}
		c.CPUUsage.TotalUsage = uint64(st.CPU.Nanoseconds())
		return c, st, err
	}
	// one-shot: a single sample, no precpu (the daemon's zeros).
	pre := cpuStats{OnlineCPUs: uint32(runtime.NumCPU())}
	var err error
	if !boolParam(r, "one-shot") {
		if pre, _, err = sample(); err != nil {
			fail(w, err)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(statsInterval):
		}
	}
	cpu, st, err := sample()
	if err != nil {
		fail(w, err)
		return
	}
	limit := st.MemoryLimit
	if limit == 0 {
		limit = hostMemory() // as the daemon: the host's when there is no limit
	}
	now := time.Now()
	writeJSON(w, http.StatusOK, statsResponse{
		Read: now.Format(time.RFC3339Nano), PreRead: now.Add(-statsInterval).Format(time.RFC3339Nano),
		ID: sb.ID(), Name: "/" + sb.Name(),
		PidsStats:   pidsStats{Current: uint64(st.Pids)},
		MemoryStats: memoryStats{Usage: st.MemoryBytes, Limit: limit, Stats: map[string]uint64{}},
		CPUStats:    cpu, PreCPUStats: pre, Networks: map[string]struct{}{},
	})
}

// statsInterval separates the two samples of a stats request.
const statsInterval = 500 * time.Millisecond

// systemCPUUsage is the host's CPU time in nanoseconds, summed over its
// CPUs (the first line of /proc/stat, in clock ticks of 1/100 s), as the
// daemon reports system_cpu_usage.
func systemCPUUsage() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks uint64
	for _, v := range f[1:8] { // user nice system idle iowait irq softirq
		n, _ := strconv.ParseUint(v, 10, 64)
		ticks += n
	}
	return ticks * (1e9 / 100)
}

// hostMemory is the host's memory in bytes (MemTotal).
func hostMemory() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// listPorts is the sandbox's ports as /containers/json shows them.
func listPorts(i service.Info) []portSummary {
	out := []portSummary{}
	if !i.Running {
		return out
	}
	for _, p := range i.Ports {
		out = append(out, portSummary{IP: p.HostIP, PrivatePort: p.ContainerPort, PublicPort: p.HostPort, Type: p.Protocol})
	}
	return out
}

// reopen reads sb's state again (a restart settled meanwhile, or another
// process changed it), or returns sb when it cannot be read.
func (s *Server) reopen(sb *service.Container) *service.Container {
	if cur, err := s.b.Open(sb.ID()); err == nil {
		return cur
	}
	return sb
}
