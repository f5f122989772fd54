// Package backend defines the one interface that every slopbox execution
// backend implements (sandbox/ with containers, local/ on the host) and the
// pieces of behaviour they must share exactly: the entry script, the split
// marker, environment precedence and output capping.
//
// Callers (dockercompat/, harnesses written in Go, the CLI) depend on this
// package only; they pick an implementation by name through Register/Open.
package backend

import (
	"context"
	"os"
	"time"

	"github.com/containerd/errdefs"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrClosed is returned by every method of a Sandbox after Cleanup.
	ErrClosed = errdefs.ErrNotFound.WithMessage("sandbox has been cleaned up")
	// ErrStdinInStream is returned by Stream when the request carries stdin.
	ErrStdinInStream = errdefs.ErrInvalidArgument.WithMessage("stdin is not supported in streaming mode; use Exec")
	// ErrUnknownUser is wrapped when a user name is not in the image's passwd file.
	ErrUnknownUser = errdefs.ErrInvalidArgument.WithMessage("no matching entries in passwd file")
	// ErrBusy is returned when a command is started while another one runs.
	ErrBusy = errdefs.ErrConflict.WithMessage("a command is already running in this sandbox")
)

// Backend creates sandboxes.
type Backend interface {
	// Name is the registry name ("sandbox", "local").
	Name() string
	// Spawn creates a long-lived sandbox over spec.Workspace.
	Spawn(ctx context.Context, spec SpawnSpec) (Sandbox, error)
	// Close releases what the backend holds for spawning (sandbox/: the
	// sandboxes started ahead of need and the spawn server). Sandboxes
	// already spawned are not touched; Spawn after Close starts anew.
	Close()
}

// Sandbox is one long-lived execution environment over a workspace.
// Methods are safe for concurrent use; at most one command runs at a time.
type Sandbox interface {
	// ID identifies the sandbox (container id for sandbox/, a random id for local/).
	ID() string
	// Workdir is the path of the workspace as commands see it.
	Workdir() string
	// Exec runs one command to completion and returns its buffered result.
	Exec(ctx context.Context, req ExecRequest) (*Result, error)
	// Stream runs one command and delivers output chunks as they are
	// produced, then exactly one EventFinished carrying the result. The
	// channel is closed after the finished event.
	Stream(ctx context.Context, req ExecRequest) (<-chan Event, error)
	// Poll reports whether a command is running, and otherwise the exit code
	// of the last one (nil before any command).
	Poll() (running bool, exitCode *int)
	// Kill stops the running command's whole process tree. It is a no-op
	// when nothing runs.
	Kill() error
	// Cleanup tears everything down. It is idempotent; afterwards every
	// other method returns ErrClosed.
	Cleanup() error
}

// Context says who a sandbox runs code for; it selects the default user and
// whether evaluation-only setup commands run.
type Context string

const (
	ContextAgent      Context = "agent"
	ContextEvaluation Context = "evaluation"
)

// Network modes.
const (
	NetworkNone   = "none"
	NetworkHost   = "host"
	NetworkBridge = "bridge"
)

// SpawnSpec describes a sandbox. The zero value of every field is a safe
// default: no network, workspace mounted at /workspace, setup enabled.
type SpawnSpec struct {
	Name   string
	Labels map[string]string
	// Hostname is the sandbox's host name (default: derived from Name).
	Hostname string
	// Image is the image reference (sandbox backend only).
	Image string
	// Workspace is the host directory the sandbox works in. Required.
	Workspace string
	// Workdir is where the workspace appears inside (default /workspace; the
	// local backend ignores it and uses Workspace).
	Workdir string
	// NoWorkspaceMount leaves the workspace unmounted (mount_workspace: false).
	NoWorkspaceMount bool
	// Cwd is the default working directory of commands (default: Workdir
	// when the workspace is mounted, else the image's WorkingDir, else /).
	Cwd string
	// Mounts are extra bind mounts, lowest precedence first (spec
	// extra_mounts, then spawn mounts); merged by container path.
	Mounts []Mount
	// StaticAssets are mounted read-only at /static/<SavePath>, above Mounts.
	StaticAssets []StaticAsset
	// AllowedMountRoots, when set, restricts bind sources to these roots.
	AllowedMountRoots []string

	// Env is layered: host env (IncludeOSEnv) < SpecEnv < Env < ExecRequest.Env.
	SpecEnv      map[string]string
	Env          map[string]string
	IncludeOSEnv bool

	// User is "uid[:gid]" or "name[:group]"; empty picks the default for Context.
	User    string
	Context Context
	// GroupAdd are supplementary groups (names in the image's /etc/group,
	// or ids) of the main command and of every exec (docker --group-add).
	GroupAdd []string
	// AgentUser is the agent context's default user when User is empty
	// (SlopCodeBench: "$HUID:$HGID" when both are set, which
	// backend.AgentUserFromEnv reads); empty means 0:0. The library reads
	// no environment variable for it.
	AgentUser string

	Network string
	// Networks are user-defined networks to attach to besides (or, when
	// Network is none of Docker's predefined ones, after) Network: docker
	// run --network NAME --network-alias A, the Engine API's
	// NetworkingConfig.EndpointsConfig.
	Networks []NetworkAttachment
	Ports    []PortMapping
	// ExtraHosts ("NAME:IP", docker run --add-host) are added to the
	// sandbox's /etc/hosts; DNS, DNSSearch and DNSOptions (--dns,
	// --dns-search, --dns-option) replace its resolv.conf's servers,
	// search domains and options.
	// AllowHostLoopback lets a bridge sandbox reach the host's loopback
	// (on its gateway's address), which it cannot by default.
	AllowHostLoopback          bool
	ExtraHosts                 []string
	DNS, DNSSearch, DNSOptions []string
	Limits                     Limits
	// CapAdd and CapDrop change Docker's default capability set (docker
	// run --cap-add/--cap-drop names, or ALL). SeccompUnconfined runs
	// without the syscall filter. Weakenings the policy refuses
	// (CheckPolicy) need an explicit entry in Unsafe: "cap-add=NAME",
	// "seccomp=unconfined". All of it shows in inspect.
	CapAdd, CapDrop   []string
	SeccompUnconfined bool
	Unsafe            []string
	// ReadOnlyRootfs makes the root filesystem read-only (docker run
	// --read-only): only the workspace, read-write mounts and a TmpBytes
	// /tmp can be written.
	ReadOnlyRootfs bool

	Setup        Setup
	DisableSetup bool
	// Keep leaves the sandbox in place at Cleanup (for inspection).
	Keep bool
	// AutoRemove removes the sandbox when it is stopped or killed (docker
	// run -d --rm).
	AutoRemove bool
	// Disposable: the sandbox goes with its command (run --rm; AutoRemove
	// implies it; Keep overrides it). Its writable layer is mounted
	// volatile (overlayfs skips every sync to the disk: at each copy-up and
	// when the layer is unmounted), as podman mounts a --rm container's, so
	// its removal does not wait for the host's disk. A stopped Disposable
	// sandbox starts again within the same boot; after the host restarted,
	// its layer may be incomplete, and start, commit, diff and export
	// refuse it.
	Disposable bool
}

// Setup holds the commands run before each command (reference §1.5).
type Setup struct {
	Commands     []string
	EvalCommands []string // only in ContextEvaluation
	Command      string   // spawn-time setup command, appended last
}

// Mount is a bind mount. Source may be relative to the workspace.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
	// HandOver (podman's :U; root only) gives the source's entries owned by
	// host uid or gid 0 to the sandbox user's unprivileged host ids before
	// the mount, as a root-owned workspace is: no sandbox id maps to host
	// root, so container root cannot write a root-owned directory otherwise.
	HandOver bool
	// KeepOwners (root) mounts the source with its host owners as they
	// are, as podman and Docker mount a bind in a user namespace: not
	// idmapped, so an owner no sandbox id maps to (host root, another
	// user) appears as nobody, and the sandbox reaches its files, sockets
	// included, only as any other local user may. It is for a source
	// someone other than the caller asked for (an rlm_code config's
	// extra_args); without it, a directory whose owner no sandbox id maps
	// to is idmapped so that its owner appears as the sandbox's user.
	// It wins over HandOver. Rootless the caller's own files are
	// container root's anyway (the sandbox's user namespace maps them so).
	KeepOwners bool
	// Volume, when set, names a volume (docker -v NAME:/path, --mount
	// type=volume) in place of Source; AnonymousVolume asks for a new
	// one of its own (-v /path). The sandbox backend makes a volume that
	// does not exist yet.
	Volume          string
	AnonymousVolume bool
	// CreateMissing creates an absolute Source that does not exist as a
	// directory (and its missing parents, mode 0755, as the caller),
	// as Docker does for -v and HostConfig.Binds (not for --mount).
	CreateMissing bool
	// Flag is the option that asked for the mount as the user wrote it
	// (--mount type=bind,src=/a,dst=/b), for the errors that name it;
	// "" for -v SOURCE:TARGET.
	Flag string
}

// FlagName is how m was asked for: its Flag, or -v SOURCE:TARGET.
func (m Mount) FlagName() string {
	if m.Flag != "" {
		return m.Flag
	}
	return "-v " + m.Source + ":" + m.Target
}

// StaticAsset is a host path published read-only at /static/<SavePath>.
type StaticAsset struct {
	Source   string
	SavePath string
}

// NetworkAttachment is one user-defined network a sandbox is on: its
// name or id, the extra names the network's DNS gives the sandbox, and
// the IPv4 address asked for ("": the next free one).
type NetworkAttachment struct {
	Network string
	Aliases []string
	IPv4    string
}

// IsPredefinedNetwork reports whether name is a network mode rather than a
// user-defined network: none, host, bridge (or "", or "default").
func IsPredefinedNetwork(name string) bool {
	switch name {
	case "", NetworkNone, NetworkHost, NetworkBridge, "default":
		return true
	}
	return false
}

// PortMapping publishes a container port on the host.
type PortMapping struct {
	HostIP        string // default 127.0.0.1
	HostPort      int
	ContainerPort int
	Protocol      string // tcp (default) or udp
}

// Limits are resource limits; zero means unlimited.
type Limits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	// TmpBytes, when set, makes /tmp a tmpfs of that size: a command that
	// fills it gets ENOSPC, and what it holds counts as the sandbox's
	// memory. Without it /tmp is the image's, in the root filesystem.
	TmpBytes int64
	// Tmpfs are tmpfs mounts at other paths (path: size in bytes), each
	// bounded and counted as TmpBytes is.
	Tmpfs map[string]int64
	// RootfsBytes, when set, bounds what can be written to the root
	// filesystem (its writable layer lives in memory, counted as the
	// sandbox's, and does not survive a stop).
	RootfsBytes int64
	// Strict turns an unenforceable limit into a Spawn error.
	Strict bool
}

// ExecRequest is one command.
type ExecRequest struct {
	// Argv runs directly; Shell (when Argv is empty) runs via /bin/sh -c.
	Argv  []string
	Shell string
	Env   map[string]string
	Cwd   string
	User  string
	// Stdin chunks are written in order with no separator.
	Stdin [][]byte
	// Timeout of zero means no timeout.
	Timeout time.Duration
	// OutputLimit caps each of stdout and stderr in bytes (0: unlimited).
	OutputLimit int64
	// NoSetup skips the entry script for this command even when setup is on.
	NoSetup bool
}

// Result is what a finished command produced. Output is UTF-8: invalid
// bytes are replaced with U+FFFD, never dropped.
type Result struct {
	ExitCode    int           `json:"exit_code"`
	Stdout      string        `json:"stdout"`
	Stderr      string        `json:"stderr"`
	SetupStdout string        `json:"setup_stdout"`
	SetupStderr string        `json:"setup_stderr"`
	Elapsed     time.Duration `json:"-"`
	ElapsedSecs float64       `json:"elapsed"`
	TimedOut    bool          `json:"timed_out"`
	Truncated   bool          `json:"truncated"`
	// StdoutBytes and StderrBytes are the sizes produced before any cap.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	OOMKilled   bool  `json:"oom_killed"`
	// Unenforced lists limits that could not be enforced on this host.
	Unenforced []string `json:"unenforced,omitempty"`
}

// EventKind names a stream event.
type EventKind string

const (
	EventStdout   EventKind = "stdout"
	EventStderr   EventKind = "stderr"
	EventFinished EventKind = "finished"
)

// Event is one streamed chunk, or the final result.
type Event struct {
	Kind   EventKind
	Data   string
	Result *Result
}

// AgentUserFromEnv returns "$HUID:$HGID" when both are set (SlopCodeBench's
// default user for agent runs), else "". Front ends (the CLI, dockercompat)
// pass it as SpawnSpec.AgentUser.
func AgentUserFromEnv() string {
	if u, g := os.Getenv("HUID"), os.Getenv("HGID"); u != "" && g != "" {
		return u + ":" + g
	}
	return ""
}
