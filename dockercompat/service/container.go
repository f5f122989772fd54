package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/networks"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/imagebuild"
	"github.com/slopbox/slopbox/internal/pidwatch"
	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox"
)

// The service's vocabulary: the records the surfaces read and the options
// they pass, as the sandbox backend defines them (data only, as moby's API
// types are; the behaviour stays behind Service and Container).
type (
	Info          = sandbox.Info
	NetworkInfo   = sandbox.NetworkInfo
	Volume        = sandbox.Volume
	Process       = sandbox.Process
	Stats         = sandbox.Stats
	Change        = sandbox.Change
	LogOptions    = sandbox.LogOptions
	DetachOptions = sandbox.DetachOptions
	AttachedStart = sandbox.AttachedStart
	StartError    = sandbox.StartError
)

// Handles a verb returns: a command on a terminal (exec -t, run -t), a
// follower of a main command's output (attach) and the bound on what a
// copy out of a container may write.
type (
	Terminal       = sandbox.Terminal
	OutputFollower = sandbox.OutputFollower
	CopyCounter    = sparse.Counter
)

// Wait conditions (docker wait --condition, POST /containers/{id}/wait).
const (
	WaitNotRunning = sandbox.WaitNotRunning
	WaitNextExit   = sandbox.WaitNextExit
	WaitRemoved    = sandbox.WaitRemoved
)

// ExitGrace is how long a container seen stopped with no exit recorded is
// given before it counts as killed (137); TerminalDrain how long a
// terminal's output is drained after its command ends.
const (
	ExitGrace     = sandbox.ExitGrace
	TerminalDrain = sandbox.TerminalDrain
)

// The errors the surfaces tell apart (each carries its errdefs class,
// which is what the Engine API's status comes from).
var (
	ErrNotFound       = sandbox.ErrNotFound
	ErrNameInUse      = sandbox.ErrNameInUse
	ErrPaused         = sandbox.ErrPaused
	ErrNotPaused      = sandbox.ErrNotPaused
	ErrVolumeNotFound = sandbox.ErrVolumeNotFound
	// ErrMountNotAllowed: a bind source outside the policy's roots.
	ErrMountNotAllowed = oci.ErrMountNotAllowed
)

// DefaultMaskedPaths and DefaultReadonlyPaths are the paths every
// container has masked and read-only (inspect's HostConfig shows them).
var (
	DefaultMaskedPaths   = slices.Clone(oci.DefaultMaskedPaths)
	DefaultReadonlyPaths = slices.Clone(oci.DefaultReadonlyPaths)
)

// SetWinsize sizes the terminal whose master is f.
func SetWinsize(f *os.File, rows, cols uint16) error { return sandbox.SetWinsize(f, rows, cols) }

// WatchExit calls exited once process pid has exited (its pidfd); cancel
// stops the watch; ok is false when pid could not be watched.
func WatchExit(pid int, exited func(pidfd int)) (cancel func(), ok bool) {
	return pidwatch.Watch(pid, exited)
}

// Service is the Docker verbs over the sandboxes and images of one state
// root: what the CLI and the Engine API both call.
type Service struct{ b *sandbox.Backend }

// New serves the sandboxes and images of backend b.
func New(b *sandbox.Backend) *Service { return &Service{b: b} }

// Close releases what the backend keeps for spawns (its spawn helpers,
// its ready sandboxes); the containers keep running.
func (s *Service) Close() { s.b.Close() }

// Store is the image store.
func (s *Service) Store() *image.Store { return s.b.Store() }

// Networks is the networks' service (docker network …).
func (s *Service) Networks() *networks.Service { return networks.New(s.b) }

// Builder builds images from a Dockerfile (docker build).
func (s *Service) Builder() *imagebuild.Builder { return imagebuild.New(s.b) }

// Commit makes an image of a container (docker commit).
func (s *Service) Commit(ctx context.Context, o imagebuild.CommitOptions) (*imagebuild.Result, error) {
	return imagebuild.Commit(ctx, s.b, o)
}

// Open finds a container by ID, ID prefix or name.
func (s *Service) Open(ref string) (*Container, error) {
	sb, err := s.b.Open(ref)
	if err != nil {
		return nil, err
	}
	return &Container{sb: sb}, nil
}

// List is every container's record.
func (s *Service) List() ([]Info, error) { return s.b.List() }

// Rename gives container ref a new name.
func (s *Service) Rename(ref, name string) error { return s.b.Rename(ref, name) }

// Wait is docker wait of container id under cond.
func (s *Service) Wait(ctx context.Context, id, cond string) (int, error) {
	return s.b.WaitCondition(ctx, id, cond)
}

// RemovedExit is the exit kept of an auto-removed container id.
func (s *Service) RemovedExit(id string) (int, time.Time, bool) { return s.b.RemovedExit(id) }

// PruneAll is docker system prune's part of the containers: every one
// not running goes, and what killed slopbox processes left behind.
func (s *Service) PruneAll() ([]string, error) { return s.b.Prune(false) }

// CreateVolume makes volume name (a generated one when empty).
func (s *Service) CreateVolume(name string, labels map[string]string) (Volume, error) {
	return s.b.CreateVolume(name, labels)
}

// Volume is volume name's record.
func (s *Service) Volume(name string) (Volume, error) { return s.b.Volume(name) }

// VolumeUsers are the containers that mount v.
func (s *Service) VolumeUsers(v Volume) []string { return s.b.VolumeUsers(v) }

// RemoveVolume removes volume name (force: also one in use).
func (s *Service) RemoveVolume(name string, force bool) error { return s.b.RemoveVolume(name, force) }

// Container is one container as the surfaces see it: a handle on its
// sandbox with the verbs they use.
type Container struct{ sb *sandbox.Sandbox }

func (c *Container) ID() string           { return c.sb.ID() }
func (c *Container) Name() string         { return c.sb.Name() }
func (c *Container) Info() Info           { return c.sb.Info() }
func (c *Container) Running() bool        { return c.sb.Running() }
func (c *Container) Paused() bool         { return c.sb.Paused() }
func (c *Container) Unenforced() []string { return c.sb.Unenforced() }

// MonitorAlive reports whether its monitor (the supervisor of its main
// command) still runs.
func (c *Container) MonitorAlive() bool { return c.sb.MonitorAlive() }

// Restarting reports whether a restart policy is restarting it.
func (c *Container) Restarting() bool { return Restarting(c.sb) }

// WillRestart reports whether its policy restarts it after an exit with code.
func (c *Container) WillRestart(code int) bool { return WillRestart(c.sb, code) }

// IsFatal reports whether sig, sent by docker kill, stops it by hand.
func (c *Container) IsFatal(sig syscall.Signal) bool { return IsFatal(c.sb, sig) }

// StopByHand marks it stopped by hand (see the function) and returns it
// as it is now.
func (c *Container) StopByHand() (*Container, bool, error) {
	cur, pending, err := StopByHand(c.sb)
	return &Container{sb: cur}, pending, err
}

// StartByHand is what a start by hand does before the start (see the
// function); the caller starts what it returns, then calls unlock.
func (c *Container) StartByHand() (*Container, bool, func(), error) {
	cur, pending, unlock, err := StartByHand(c.sb)
	return &Container{sb: cur}, pending, unlock, err
}

// Start is docker start of it, with what an attached client gives it.
func (c *Container) Start(ctx context.Context, a AttachedStart) error {
	cur, err := Start(ctx, c.sb, a)
	c.sb = cur
	return err
}

// Kill is docker kill of it with sig.
func (c *Container) Kill(sig syscall.Signal) error { return Kill(c.sb, sig) }

// RemoveByHand is docker rm of it (force: -f, volumes: -v).
func (c *Container) RemoveByHand(force, volumes bool) error { return Remove(c.sb, force, volumes) }

// StartAttached starts its main command under its monitor, with what an
// attached client gives it; the caller holds StartByHand's lock.
func (c *Container) StartAttached(ctx context.Context, a AttachedStart) error {
	return c.sb.StartAttached(ctx, a)
}

// Stop is docker stop (see the function).
func (c *Container) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (restarting bool, err error) {
	return Stop(ctx, c.sb, sig, grace)
}

// StopPlan is how docker stop stops it: signal, or its --stop-signal
// (its image's STOPSIGNAL, else TERM) when empty; t seconds of grace, or
// its --stop-timeout (else 10 s) when nil.
func (c *Container) StopPlan(signal string, t *int) (syscall.Signal, time.Duration, error) {
	dir := c.sb.Info().StateDir
	sig, err := dockercompat.StopSignal(dir, signal)
	if err != nil {
		return 0, 0, err
	}
	return sig, dockercompat.StopGrace(dir, t), nil
}

// Restart is docker restart: stopped as docker stop stops it (StopPlan's
// signal and t) when it runs, then started by hand (a pending restart is
// cancelled, restarts count from 0).
func (c *Container) Restart(ctx context.Context, signal string, t *int) error {
	if err := c.CheckRestart(); err != nil {
		return err
	}
	if c.Running() {
		sig, grace, err := c.StopPlan(signal, t)
		if err != nil {
			return err
		}
		if _, err := c.Stop(ctx, sig, grace); err != nil {
			return err
		}
	}
	return c.Start(ctx, AttachedStart{})
}

// CheckRestart refuses the restart of a container removed when it stops
// (--rm): its stop would remove it before the start. (dockerd keeps it,
// marked restarted by hand; slopbox does not carry that mark yet.) The
// refusal comes before anything is done: the container is left as it is.
func (c *Container) CheckRestart() error {
	if c.sb.Info().AutoRemove {
		return errdefs.ErrNotImplemented.WithMessage(fmt.Sprintf("cannot restart %s: it was made with --rm, so stopping it removes it; stop it and run it again", c.Name()))
	}
	return nil
}

// StopGrace sends sig to its main command and kills every process after grace.
func (c *Container) StopGrace(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	return c.sb.StopGrace(ctx, sig, grace)
}

// Signal sends sig to its main command.
func (c *Container) Signal(sig syscall.Signal) error { return c.sb.Signal(sig) }

// CheckRemove refuses its removal without force while it runs or restarts.
func (c *Container) CheckRemove(force bool) error { return CheckRemove(c.sb, force) }

// Remove removes it (stopping what it runs); RemoveWithVolumes also
// its anonymous volumes (docker rm -v).
func (c *Container) Remove() error            { return c.sb.Remove() }
func (c *Container) RemoveWithVolumes() error { return c.sb.RemoveWithVolumes() }

// KeepRemovedExit keeps code as its exit once it is removed (docker wait
// --condition removed of an auto-removed container).
func (c *Container) KeepRemovedExit(code int) { c.sb.KeepRemovedExit(code) }

// Pause freezes its processes; Unpause thaws them.
func (c *Container) Pause() error   { return c.sb.Pause() }
func (c *Container) Unpause() error { return c.sb.Unpause() }

// Update changes its limits (docker update).
func (c *Container) Update(l backend.Limits) ([]string, error) { return c.sb.Update(l) }

// SetDetachOptions records how its main command is attached at its next start.
func (c *Container) SetDetachOptions(o DetachOptions) error { return c.sb.SetDetachOptions(o) }

// Logs writes its log as o selects.
func (c *Container) Logs(ctx context.Context, o LogOptions, stdout, stderr io.Writer) error {
	return c.sb.Logs(ctx, o, stdout, stderr)
}

// FollowOutput follows its main command's output from now on (docker attach).
func (c *Container) FollowOutput() (*OutputFollower, error) { return c.sb.FollowOutput() }

// Processes lists its processes (docker top).
func (c *Container) Processes() ([]Process, error) { return c.sb.Processes() }

// Stats reads its resource use.
func (c *Container) Stats() (Stats, error) { return c.sb.Stats() }

// Changes lists what differs from its image (docker diff).
func (c *Container) Changes() ([]Change, error) { return c.sb.Changes() }

// WritableSize is the size of its writable layer.
func (c *Container) WritableSize() int64 { return c.sb.WritableSize() }

// Export writes its filesystem as a tar (docker export).
func (c *Container) Export(w io.Writer) error { return c.sb.Export(w) }

// CopyOut writes src, from inside it, to w as a tar (docker cp out).
func (c *Container) CopyOut(ctx context.Context, src string, w io.Writer) error {
	return c.sb.CopyOut(ctx, src, w)
}

// CopyIn unpacks the tar r at dest inside it (docker cp in).
func (c *Container) CopyIn(ctx context.Context, r io.Reader, dest string, contents bool) error {
	return c.sb.CopyIn(ctx, r, dest, contents)
}

// CopyCounter counts a copy out of it against the space its store has
// free (the apparent size a client writes sparse files out to).
func (c *Container) CopyCounter() *CopyCounter { return &sparse.Counter{Bound: c.sb.CopyBound()} }

// ReadFiles and WriteFiles are the archive endpoints' reads and writes.
func (c *Container) ReadFiles(src string, w io.Writer) error { return c.sb.ReadFiles(src, w) }
func (c *Container) WriteFiles(r io.Reader, dest string) error {
	return c.sb.WriteFiles(r, dest)
}

// Exec runs req in it to completion.
func (c *Container) Exec(ctx context.Context, req backend.ExecRequest) (*backend.Result, error) {
	return c.sb.Exec(ctx, req)
}

// Attach runs req in it on the caller's files.
func (c *Container) Attach(ctx context.Context, req backend.ExecRequest, stdin, stdout, stderr *os.File, detach bool) (int, error) {
	return c.sb.Attach(ctx, req, stdin, stdout, stderr, detach)
}

// AttachStrict is Attach whose command's start failure is a *StartError.
func (c *Container) AttachStrict(ctx context.Context, req backend.ExecRequest, stdin, stdout, stderr *os.File, detach bool) (int, error) {
	return c.sb.AttachStrict(ctx, req, stdin, stdout, stderr, detach)
}

// AttachTerminal runs req in it on a new terminal of rows×cols.
func (c *Container) AttachTerminal(ctx context.Context, req backend.ExecRequest, rows, cols uint16) (*Terminal, error) {
	return c.sb.AttachTerminal(ctx, req, rows, cols)
}
