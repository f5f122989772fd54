package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/slopbox/slopbox/sandbox"
)

// createdConfig is what a create request asked for that the sandbox does
// not keep in the form Docker's inspect shows it; it is kept next to the
// sandbox's state (and goes with it).
type createdConfig struct {
	Entrypoint []string          `json:",omitempty"` // the effective one: the request's, else the image's
	Binds      []string          `json:",omitempty"`
	Mounts     []map[string]any  `json:",omitempty"`
	Tmpfs      map[string]string `json:",omitempty"`
}

const createdConfigFile = "engine-create.json"

func saveCreatedConfig(dir string, c createdConfig) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, createdConfigFile), b, 0o600)
}

// loadCreatedConfig reads it back; a container made by the slopbox CLI
// has none.
func loadCreatedConfig(dir string) createdConfig {
	var c createdConfig
	if b, err := os.ReadFile(filepath.Join(dir, createdConfigFile)); err == nil {
		json.Unmarshal(b, &c)
	}
	return c
}

// envList is an environment in Docker's KEY=VALUE form, sorted.
func envList(env map[string]string) []string {
	out := []string{}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
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
		if m.Volume != "" {
			out = append(out, map[string]any{"Type": "volume", "Name": m.Volume, "Source": m.Source, "Destination": m.Target,
				"Driver": "local", "Mode": mode, "RW": !m.ReadOnly, "Propagation": ""})
			continue
		}
		out = append(out, map[string]any{"Type": "bind", "Source": m.Source, "Destination": m.Target,
			"Mode": mode, "RW": !m.ReadOnly, "Propagation": "rprivate"})
	}
	return out
}
