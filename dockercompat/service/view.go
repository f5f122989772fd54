// Docker's view of a sandbox: inspect, the states and status text of ps
// and its filters. It reads what dockercompat recorded at the create
// (dockercompat.LoadCreated) next to the sandbox's own state.

package service

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/dockercompat/networks"
	"github.com/slopbox/slopbox/image"
)

// health is State.Health of the sandbox in dir with healthcheck h: none
// without one, nor before serve has run it.
func health(dir string, h *v1.HealthConfig) json.RawMessage {
	if h == nil || len(h.Test) == 0 || h.Test[0] == "NONE" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, dockercompat.HealthFile))
	if err != nil || !json.Valid(b) {
		return nil
	}
	return b
}

// envList is an environment in Docker's KEY=VALUE form, sorted, with the
// names given without a value as they were given.
func envList(env map[string]string, names []string) []string {
	out := []string{}
	for k, v := range env {
		if !slices.Contains(names, k) {
			out = append(out, k+"="+v)
		}
	}
	out = append(out, names...)
	sort.Strings(out)
	return out
}

// imageName is the container's image as Docker shows it: as its create
// named it, else its name in Docker's form.
func imageName(i Info, cc dockercompat.CreateRecord) string {
	if cc.Image != "" {
		return cc.Image
	}
	return image.DockerName(i.Image)
}

// ImageName is imageName for a sandbox's list entry (GET /containers/json).
func ImageName(i Info) string { return imageName(i, dockercompat.LoadCreated(i.StateDir)) }

// Command is a sandbox's command as dockerd lists it (GET
// /containers/json, docker ps): the program and its arguments, each
// argument with a space in it between single quotes.
func Command(i Info) string {
	if len(i.Command) == 0 {
		return ""
	}
	parts := []string{i.Command[0]}
	for _, a := range i.Command[1:] {
		if strings.Contains(a, " ") {
			a = "'" + a + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// cmdOf is the Cmd part of command, after entrypoint.
func cmdOf(command, entrypoint []string) []string {
	if len(entrypoint) <= len(command) && slices.Equal(command[:len(entrypoint)], entrypoint) {
		return command[len(entrypoint):]
	}
	return command
}

// inspectMounts is the top-level Mounts of inspect: the bind mounts.
func inspectMounts(i Info) []container.MountPoint {
	out := []container.MountPoint{}
	for _, m := range i.BindMounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		if m.Volume != "" {
			out = append(out, container.MountPoint{Type: mount.TypeVolume, Name: m.Volume, Source: m.Source, Destination: m.Target,
				Driver: "local", Mode: mode, RW: !m.ReadOnly})
			continue
		}
		out = append(out, container.MountPoint{Type: mount.TypeBind, Source: m.Source, Destination: m.Target,
			Mode: mode, RW: !m.ReadOnly, Propagation: mount.PropagationRPrivate})
	}
	return out
}

// Inspect is docker inspect of a container, GET /containers/{id}/json in
// Docker's shape, with the fields docker-py and the docker CLI read.
func Inspect(i Info) *ContainerInspect {
	cc := dockercompat.LoadCreated(i.StateDir)
	finished := "0001-01-01T00:00:00Z"
	if !i.FinishedAt.IsZero() {
		finished = i.FinishedAt.Format(time.RFC3339Nano)
	}
	path, args := "", []string{}
	if len(i.Command) > 0 {
		path, args = i.Command[0], i.Command[1:]
	}
	pid := 0
	if i.Running {
		pid = i.Pid
	}
	var entrypoint []string // null when there is none, as Docker
	if len(cc.Entrypoint) > 0 {
		entrypoint = cc.Entrypoint
	}
	status := State(i)
	return &ContainerInspect{
		ID: i.ID, Created: i.Created.Format(time.RFC3339Nano), Path: path, Args: args,
		State: &ContainerState{
			Status: status, Restarting: status == "restarting", Running: i.Running, Paused: i.Paused, OOMKilled: i.OOMKills > 0,
			Pid: pid, ExitCode: i.ExitCode, StartedAt: i.LastExec.Format(time.RFC3339Nano),
			FinishedAt: finished, Health: health(i.StateDir, cc.Healthcheck),
		},
		Image: i.ImageID, Name: "/" + i.Name, RestartCount: dockercompat.RestartCount(i.StateDir), Driver: "overlay", Platform: "linux",
		LogPath:    i.StateDir + "/container.log",
		HostConfig: hostConfig(i, cc),
		Config: &ContainerConfig{
			Hostname: i.Hostname, User: i.User, Env: envList(i.Env, cc.EnvNames), Cmd: cmdOf(i.Command, cc.Entrypoint), Image: imageName(i, cc), WorkingDir: i.Workdir,
			Entrypoint: entrypoint, Labels: nonNil(i.Labels), Tty: i.Tty, OpenStdin: i.OpenStdin,
			AttachStdout: true, AttachStderr: true,
			Healthcheck: cc.Healthcheck, MacAddress: cc.MacAddress, StopTimeout: cc.StopTimeout, StopSignal: cc.StopSignal,
		},
		NetworkSettings: networkSettings(i, cc),
		Mounts:          inspectMounts(i),
	}
}

// hostConfig is inspect's HostConfig: Docker's whole key set, each with
// what the create asked for (cc) or what the sandbox has, and dockerd's
// default for what slopbox has no setting of.
func hostConfig(i Info, cc dockercompat.CreateRecord) *HostConfig {
	orEmpty := func(v []string) []string {
		if v == nil {
			return []string{}
		}
		return v
	}
	swap := cc.MemorySwap
	if swap == 0 {
		swap = i.Limits.MemoryBytes // the memory+swap limit it has: no swap
	}
	return &HostConfig{
		Binds: cc.Binds, LogConfig: cc.LogConfig, NetworkMode: i.Network,
		PortBindings: portMap(i, true), RestartPolicy: cc.RestartPolicy, AutoRemove: i.AutoRemove,
		VolumeDriver: cc.VolumeDriver, VolumesFrom: cc.VolumesFrom,
		CapAdd: i.CapAdd, CapDrop: i.CapDrop, CgroupnsMode: "private",
		Dns: orEmpty(cc.DNS), DnsOptions: orEmpty(cc.DNSOptions), DnsSearch: orEmpty(cc.DNSSearch), ExtraHosts: cc.ExtraHosts,
		GroupAdd: cc.GroupAdd, IpcMode: "private", Links: cc.Links, ReadonlyRootfs: i.ReadonlyRootfs,
		SecurityOpt: []string{"seccomp=" + i.SeccompProfile, "no-new-privileges"},
		ShmSize:     64 << 20, Runtime: cmp.Or(cc.Runtime, "runc"),
		Isolation: cc.Isolation, CpuShares: cc.CpuShares, Memory: i.Limits.MemoryBytes, NanoCpus: int64(i.Limits.CPUs * 1e9),
		BlkioWeightDevice: []struct{}{}, CpusetCpus: cc.CpusetCpus, CpusetMems: cc.CpusetMems, Devices: []struct{}{},
		MemorySwap: swap, MemorySwappiness: cc.MemorySwappiness, PidsLimit: i.Limits.Pids,
		MaskedPaths: DefaultMaskedPaths, ReadonlyPaths: DefaultReadonlyPaths,
		Mounts: cc.Mounts, Tmpfs: cc.Tmpfs, Init: cc.Init,
	}
}

// networkSettings is inspect's NetworkSettings: as dockerd's, the
// endpoint on the sandbox's one network under that network's name (none,
// host, bridge). No address, as podman's for slirp4netns: a bridge
// sandbox's 10.0.2.100 exists only inside its own network namespace (every
// one has it), so a client that connected to it from the host would time
// out and one in another sandbox would reach itself; published ports are
// the way in.
func networkSettings(i Info, cc dockercompat.CreateRecord) *NetworkSettings {
	return &NetworkSettings{Ports: portMap(i, i.Running), Networks: Networks(i), MacAddress: cc.MacAddress}
}

// Networks is a sandbox's NetworkSettings.Networks in GET
// /containers/json: its one network by name, as inspect has it (so
// docker ps --format '{{.Networks}}' names it).
func Networks(i Info) map[string]*EndpointSettings {
	if len(i.Networks) > 0 {
		// User-defined networks: each with its interface while the
		// sandbox runs (Docker's shape; no address when stopped).
		out := map[string]*EndpointSettings{}
		for _, n := range i.Networks {
			ep := &EndpointSettings{Aliases: n.Aliases, NetworkID: n.ID}
			if n.IPv4 != "" {
				ep.IPAMConfig = &EndpointIPAMConfig{IPv4Address: n.IPv4}
			}
			if e := n.Endpoint; e != nil && i.Running {
				ep.EndpointID, ep.Gateway, ep.IPAddress, ep.IPPrefixLen = e.EndpointID, e.Gateway.String(), e.IPAddress.String(), e.IPPrefixLen
				ep.MacAddress, ep.DNSNames = e.MacAddress, e.DNSNames
			}
			out[n.Name] = ep
		}
		return out
	}
	name := cmp.Or(i.Network, backend.NetworkNone)
	return map[string]*EndpointSettings{name: endpoint(name, i)}
}

// endpoint is the sandbox's endpoint on its network: no address (see
// networkSettings). Its MacAddress is empty: a --mac-address is echoed at
// the top level (echoed.go), not given to the interface.
func endpoint(network string, i Info) *EndpointSettings {
	endpointID := ""
	if i.Running {
		endpointID = networks.ID(network + " " + i.ID) // as GET /networks/{id} lists it
	}
	return &EndpointSettings{NetworkID: networks.ID(network), EndpointID: endpointID}
}

// portMap is the sandbox's published ports as inspect shows them:
// {"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}]}; a stopped
// sandbox's NetworkSettings have none bound.
func portMap(i Info, bound bool) PortMap {
	m := PortMap{}
	if !bound {
		return m
	}
	for _, p := range i.Ports {
		key := fmt.Sprintf("%d/%s", p.ContainerPort, p.Protocol)
		m[key] = append(m[key], PortBinding{HostIp: p.HostIP, HostPort: strconv.Itoa(p.HostPort)})
	}
	return m
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// State is Docker's State.Status of a sandbox: created, running, paused,
// exited, or dead for a broken one (its state cannot be read whole). The
// CLI's ps and the Engine API share it, with Status and Filter.
func State(i Info) string {
	switch {
	case i.Broken != "":
		return "dead"
	case i.Paused:
		return "paused"
	case i.Running:
		return "running"
	case i.Pid == 0 && i.FinishedAt.IsZero():
		return "created"
	case RestartingInfo(i):
		return "restarting"
	}
	return "exited"
}

// Status is docker ps's STATUS column (the Engine API's Status).
func Status(i Info) string {
	switch State(i) {
	case "dead":
		return "Broken: " + i.Broken
	case "running":
		return "Up " + units.HumanDuration(time.Since(i.Created))
	case "paused":
		return "Up " + units.HumanDuration(time.Since(i.Created)) + " (Paused)"
	case "created":
		return "Created"
	case "restarting":
		return fmt.Sprintf("Restarting (%d) %s ago", i.ExitCode, units.HumanDuration(time.Since(i.FinishedAt)))
	}
	if i.FinishedAt.IsZero() {
		return "Exited"
	}
	return fmt.Sprintf("Exited (%d) %s ago", i.ExitCode, units.HumanDuration(time.Since(i.FinishedAt)))
}

// psFilterKeys are the docker ps filters slopbox knows: Docker's, less
// isolation (Windows) and health (serve's, not a sandbox's record).
var psFilterKeys = []string{"ancestor", "before", "expose", "exited", "id", "is-task", "label", "name", "network", "publish", "since", "status", "volume"}

// psStatuses are the states docker ps's status filter takes (broken is
// slopbox's name for dead).
var psStatuses = []string{"created", "restarting", "running", "removing", "paused", "exited", "dead", "broken"}

// Filter reads docker ps's filters into a match, by Docker's rules
// (package filters: values of one key OR, keys AND, every label must
// hold); list is every sandbox, for before and since. An unknown key,
// status or exit code is an error.
func Filter(f filters.Args, list []Info) (func(Info) bool, error) {
	if err := f.Validate(psFilterKeys...); err != nil {
		return nil, err
	}
	for _, v := range f.Get("status") {
		if !slices.Contains(psStatuses, v) {
			return nil, backend.InvalidValue("invalid filter 'status=%s' (created, restarting, running, removing, paused, exited, dead)", v)
		}
	}
	var exited []int
	for _, v := range f.Get("exited") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, backend.InvalidValue("invalid filter 'exited=%s': want an exit code", v)
		}
		exited = append(exited, n)
	}
	isTask, _, err := f.Bool("is-task")
	if err != nil {
		return nil, err
	}
	// before and since name a container; what is listed was created
	// before the latest of before's, after the earliest of since's.
	var before, since time.Time
	for _, key := range []string{"before", "since"} {
		for _, ref := range f.Get(key) {
			i, ok := findInfo(list, ref)
			if !ok {
				return nil, backend.InvalidValue("invalid filter '%s=%s': no such container", key, ref)
			}
			if key == "before" && (before.IsZero() || i.Created.After(before)) {
				before = i.Created
			}
			if key == "since" && (since.IsZero() || i.Created.Before(since)) {
				since = i.Created
			}
		}
	}
	matchID, matchName := f.Matcher("id"), f.Matcher("name")
	return func(i Info) bool {
		state := State(i)
		switch {
		case isTask: // no sandbox is a swarm task
			return false
		case !f.Prefix("id", i.ID) && !matchID(i.ID),
			!matchName("/" + i.Name),
			!f.Labels("label", i.Labels),
			!f.Any("status", func(v string) bool { return v == state || v == "broken" && state == "dead" }),
			!f.Any("ancestor", func(v string) bool { return ancestor(i, v) }),
			!f.Any("network", func(v string) bool { return onNetwork(i, v) }),
			!f.Any("volume", func(v string) bool { return mountsVolume(i, v) }),
			!f.Any("publish", func(v string) bool { return publishes(i, v) }),
			!f.Any("expose", func(v string) bool { return publishes(i, v) }):
			return false
		case len(exited) > 0 && (state != "exited" || !slices.Contains(exited, i.ExitCode)):
			return false
		case !before.IsZero() && !i.Created.Before(before), !since.IsZero() && !i.Created.After(since):
			return false
		}
		return true
	}, nil
}

// findInfo is the sandbox a name, id or id prefix names.
func findInfo(list []Info, ref string) (Info, bool) {
	ref = strings.TrimPrefix(ref, "/")
	for _, i := range list {
		if i.Name == ref || i.ID == ref {
			return i, true
		}
	}
	for _, i := range list {
		if len(ref) >= 3 && strings.HasPrefix(i.ID, ref) {
			return i, true
		}
	}
	return Info{}, false
}

// ancestor is docker ps's ancestor filter: the image by name (with or
// without the registry and the latest tag) or by id prefix.
func ancestor(i Info, v string) bool {
	return i.Image == v || strings.HasPrefix(i.ImageID, v) || strings.HasPrefix(strings.TrimPrefix(i.ImageID, "sha256:"), v) ||
		strings.HasSuffix(i.Image, "/"+v) || strings.HasSuffix(i.Image, "/"+v+":latest") || i.Image == v+":latest"
}

// mountsVolume is docker ps's volume filter: a volume's name, or a
// mount's destination.
func mountsVolume(i Info, v string) bool {
	for _, m := range i.BindMounts {
		if m.Target == v || m.Volume != "" && m.Volume == v {
			return true
		}
	}
	return false
}

// publishes is docker ps's publish and expose filters: a container port,
// PORT[/PROTO] (tcp when none is given), that the sandbox publishes (a
// sandbox exposes only what it publishes).
func publishes(i Info, v string) bool {
	port, proto, _ := strings.Cut(v, "/")
	if proto == "" {
		proto = "tcp"
	}
	for _, p := range i.Ports {
		if cmp.Or(p.Protocol, "tcp") == proto && strconv.Itoa(p.ContainerPort) == port {
			return true
		}
	}
	return false
}

// Lookup is CreateOptions.Lookup over the sandboxes of b: a container's
// name, environment (the main command's, as Docker's Config.Env) and
// bind mounts, for VolumesFrom and Links.
func Lookup(b *Service) func(ref string) (dockercompat.Container, error) {
	return func(ref string) (dockercompat.Container, error) {
		sb, err := b.Open(ref)
		if err != nil {
			return dockercompat.Container{}, err
		}
		i := sb.Info()
		c := dockercompat.Container{Name: i.Name, Mounts: i.BindMounts}
		for k, v := range i.Env {
			c.Env = append(c.Env, k+"="+v)
		}
		sort.Strings(c.Env)
		return c, nil
	}
}

// ListsStopped reports whether filters list stopped sandboxes without
// --all, as Docker's do: a status, exited, before or since filter.
func ListsStopped(f filters.Args) bool {
	return f.Has("status") || f.Has("exited") || f.Has("before") || f.Has("since")
}

// PruneFilter reads docker container prune's filters (until, label,
// label!) into a match; nil when none is given, so that a prune without
// filters also removes half-created state.
func PruneFilter(f filters.Args) (func(Info) bool, error) {
	if len(f) == 0 {
		return nil, nil
	}
	if err := f.Validate("until", "label", "label!"); err != nil {
		return nil, err
	}
	until, hasUntil, err := f.Until("until", time.Now())
	if err != nil {
		return nil, err
	}
	return func(i Info) bool {
		return f.LabelsMatch(i.Labels) && (!hasUntil || i.Created.Before(until))
	}, nil
}

// VolumeFilter reads docker volume ls's filters (dangling, driver, label,
// label!, name) into a match; used reports how many sandboxes use a
// volume (for dangling).
func VolumeFilter(f filters.Args, used func(Volume) int) (func(Volume) bool, error) {
	if err := f.Validate("dangling", "driver", "label", "label!", "name"); err != nil {
		return nil, err
	}
	dangling, hasDangling, err := f.Bool("dangling")
	if err != nil {
		return nil, err
	}
	matchName := f.Matcher("name")
	return func(v Volume) bool {
		return matchName(v.Name) && f.Exact("driver", v.Driver) && f.LabelsMatch(v.Labels) &&
			(!hasDangling || dangling == (used(v) == 0))
	}, nil
}

// VolumePruneFilter reads docker volume prune's filters (label, label!,
// all) into a match of the volumes to remove among those no sandbox uses:
// anonymous ones only unless all is true, or allByDefault (API before
// 1.42, where prune took every unused volume).
func VolumePruneFilter(f filters.Args, allByDefault bool) (func(Volume) bool, error) {
	if err := f.Validate("label", "label!", "all"); err != nil {
		return nil, err
	}
	all, set, err := f.Bool("all")
	if err != nil {
		return nil, err
	}
	if !set {
		all = allByDefault
	}
	return func(v Volume) bool { return (all || v.Anonymous) && f.LabelsMatch(v.Labels) }, nil
}

// onNetwork reports whether sandbox i is on network v (a name or id, as
// Docker's ps --filter network= takes).
func onNetwork(i Info, v string) bool {
	if len(i.Networks) == 0 {
		return i.Network == v || networks.ID(cmp.Or(i.Network, backend.NetworkNone)) == v
	}
	for _, n := range i.Networks {
		if n.Name == v || n.ID == v {
			return true
		}
	}
	return false
}
