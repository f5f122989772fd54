package dockercompat

import (
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

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/sandbox"
)

// created is what a create request asked for that the sandbox does
// not keep in the form Docker's inspect shows it; it is kept next to the
// sandbox's state (and goes with it).
type created struct {
	Entrypoint []string          `json:",omitempty"` // the effective one: the request's, else the image's
	Binds      []string          `json:",omitempty"`
	Mounts     []map[string]any  `json:",omitempty"`
	Tmpfs      map[string]string `json:",omitempty"`
	// EnvNames are the request's Env entries without "=": Docker keeps
	// them as given in Config.Env, and does not set them.
	EnvNames []string `json:",omitempty"`
	// Image is the image as the request named it (Docker's Config.Image).
	Image string `json:",omitempty"`
}

// imageName is the container's image as Docker shows it: as its create
// named it, else its name in Docker's form.
func imageName(i sandbox.Info, cc created) string {
	if cc.Image != "" {
		return cc.Image
	}
	return image.DockerName(i.Image)
}

// ImageName is imageName for a sandbox's list entry (GET /containers/json).
func ImageName(i sandbox.Info) string { return imageName(i, loadCreated(i.StateDir)) }

const createdFile = "engine-create.json"

// SaveCreated keeps what the options asked for that the sandbox in dir
// does not keep in the form Docker's inspect shows it (the CLI's create
// and run and the Engine API's create all do).
func (o *CreateOptions) SaveCreated(dir string, imageEntrypoint []string) error {
	c := created{Binds: o.Volumes, Entrypoint: o.EffectiveEntrypoint(imageEntrypoint), EnvNames: o.EnvNames, Image: o.Image}
	for _, m := range o.Mounts {
		c.Mounts = append(c.Mounts, map[string]any{"Type": m.Type, "Source": m.Source, "Target": m.Target, "ReadOnly": m.ReadOnly})
	}
	for _, t := range o.Tmpfs {
		dst, opts, _ := strings.Cut(t, ":")
		if c.Tmpfs == nil {
			c.Tmpfs = map[string]string{}
		}
		c.Tmpfs[dst] = opts
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, createdFile), b, 0o600)
}

// loadCreated reads it back; a container made before has none.
func loadCreated(dir string) created {
	var c created
	if b, err := os.ReadFile(filepath.Join(dir, createdFile)); err == nil {
		json.Unmarshal(b, &c)
	}
	return c
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

// cmdOf is the Cmd part of command, after entrypoint.
func cmdOf(command, entrypoint []string) []string {
	if len(entrypoint) <= len(command) && slices.Equal(command[:len(entrypoint)], entrypoint) {
		return command[len(entrypoint):]
	}
	return command
}

// inspectMounts is the top-level Mounts of inspect: the bind mounts.
func inspectMounts(i sandbox.Info) []any {
	out := []any{}
	for _, m := range i.BindMounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, map[string]any{"Type": "bind", "Source": m.Source, "Destination": m.Target,
			"Mode": mode, "RW": !m.ReadOnly, "Propagation": "rprivate"})
	}
	return out
}

// Inspect is docker inspect of a container, GET /containers/{id}/json in Docker's shape, with the fields
// docker-py and the docker CLI read.
func Inspect(i sandbox.Info) map[string]any {
	st := State(i)
	cc := loadCreated(i.StateDir)
	var entrypoint any // null when there is none, as Docker
	if len(cc.Entrypoint) > 0 {
		entrypoint = cc.Entrypoint
	}
	var binds, mounts any
	if cc.Binds != nil {
		binds = cc.Binds
	}
	if cc.Mounts != nil {
		mounts = cc.Mounts
	}
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
	return map[string]any{
		"Id": i.ID, "Created": i.Created.Format(time.RFC3339Nano), "Path": path, "Args": args,
		"State": map[string]any{
			"Status": st, "Running": i.Running, "Paused": i.Paused, "Restarting": false, "OOMKilled": i.OOMKills > 0,
			"Dead": false, "Pid": pid, "ExitCode": i.ExitCode, "Error": "", "StartedAt": i.LastExec.Format(time.RFC3339Nano),
			"FinishedAt": finished,
		},
		"Image": i.ImageID, "Name": "/" + i.Name, "RestartCount": 0, "Driver": "overlay", "Platform": "linux",
		"LogPath": i.StateDir + "/container.log", "MountLabel": "", "ProcessLabel": "", "AppArmorProfile": "", "ExecIDs": nil,
		"HostConfig": map[string]any{
			"NetworkMode": i.Network, "AutoRemove": i.AutoRemove, "ReadonlyRootfs": i.ReadonlyRootfs, "PortBindings": portMap(i, true),
			"Memory": i.Limits.MemoryBytes, "NanoCpus": int64(i.Limits.CPUs * 1e9), "PidsLimit": i.Limits.Pids,
			"CapAdd": i.CapAdd, "CapDrop": i.CapDrop, "Privileged": false,
			"Binds": binds, "Mounts": mounts, "Tmpfs": cc.Tmpfs,
			"LogConfig":   map[string]any{"Type": "json-file", "Config": map[string]string{}},
			"SecurityOpt": []string{"seccomp=" + i.SeccompProfile, "no-new-privileges"},
		},
		"Config": map[string]any{
			"Hostname": i.Hostname, "User": i.User, "Env": envList(i.Env, cc.EnvNames), "Cmd": cmdOf(i.Command, cc.Entrypoint), "Image": imageName(i, cc), "WorkingDir": i.Workdir,
			"Entrypoint": entrypoint, "Labels": nonNil(i.Labels), "Tty": i.Tty, "OpenStdin": i.OpenStdin,
			"AttachStdin": false, "AttachStdout": true, "AttachStderr": true,
		},
		"NetworkSettings": map[string]any{"Ports": portMap(i, i.Running), "Networks": map[string]any{}, "IPAddress": ""},
		"Mounts":          inspectMounts(i),
	}
}

// portMap is the sandbox's published ports as inspect shows them:
// {"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}]}; a stopped
// sandbox's NetworkSettings have none bound.
func portMap(i sandbox.Info, bound bool) map[string]any {
	m := map[string]any{}
	if !bound {
		return m
	}
	for _, p := range i.Ports {
		key := fmt.Sprintf("%d/%s", p.ContainerPort, p.Protocol)
		list, _ := m[key].([]map[string]string)
		m[key] = append(list, map[string]string{"HostIp": p.HostIP, "HostPort": strconv.Itoa(p.HostPort)})
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
func State(i sandbox.Info) string {
	switch {
	case i.Broken != "":
		return "dead"
	case i.Paused:
		return "paused"
	case i.Running:
		return "running"
	case i.Pid == 0 && i.FinishedAt.IsZero():
		return "created"
	}
	return "exited"
}

// Status is docker ps's STATUS column (the Engine API's Status).
func Status(i sandbox.Info) string {
	switch State(i) {
	case "dead":
		return "Broken: " + i.Broken
	case "running":
		return "Up " + units.HumanDuration(time.Since(i.Created))
	case "paused":
		return "Up " + units.HumanDuration(time.Since(i.Created)) + " (Paused)"
	case "created":
		return "Created"
	}
	if i.FinishedAt.IsZero() {
		return "Exited"
	}
	return fmt.Sprintf("Exited (%d) %s ago", i.ExitCode, units.HumanDuration(time.Since(i.FinishedAt)))
}

// psFilterKeys are the docker ps filters slopbox knows.
var psFilterKeys = []string{"id", "name", "label", "status", "ancestor"}

// Filter reads docker ps's filters (KEY: VALUES; the same key ORs,
// different keys AND) into a match; an unknown key or status is an error.
func Filter(filters map[string][]string) (func(sandbox.Info) bool, error) {
	for k, vs := range filters {
		if !slices.Contains(psFilterKeys, k) {
			return nil, backend.InvalidValue("invalid filter '%s' (id, name, label, status, ancestor)", k)
		}
		for _, v := range vs {
			if k == "status" && !slices.Contains([]string{"created", "running", "paused", "exited", "dead", "broken"}, v) {
				return nil, backend.InvalidValue("invalid filter 'status=%s' (created, running, paused, exited, dead)", v)
			}
		}
	}
	return func(i sandbox.Info) bool {
		for k, vs := range filters {
			ok := false
			for _, v := range vs {
				switch k {
				case "id":
					ok = ok || strings.HasPrefix(i.ID, v)
				case "name":
					ok = ok || strings.Contains(i.Name, strings.TrimPrefix(v, "/"))
				case "label":
					lk, lv, has := strings.Cut(v, "=")
					got, present := i.Labels[lk]
					ok = ok || present && (!has || got == lv)
				case "status":
					ok = ok || State(i) == v || v == "broken" && State(i) == "dead"
				case "ancestor":
					ok = ok || i.Image == v || strings.HasPrefix(i.ImageID, v) || strings.Contains(i.Image, "/"+v) || strings.HasSuffix(i.Image, "/"+v+":latest")
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}, nil
}
