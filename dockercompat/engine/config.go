package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/slopbox/slopbox/image"
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
	// EnvNames are the request's Env entries without "=": Docker keeps
	// them as given in Config.Env, and does not set them.
	EnvNames []string `json:",omitempty"`
	// Image is the image as the request named it (Docker's Config.Image).
	Image string `json:",omitempty"`
}

// imageName is the container's image as Docker shows it: as its create
// named it, else (made by the slopbox CLI) its name in Docker's form.
func imageName(i sandbox.Info, cc createdConfig) string {
	if cc.Image != "" {
		return cc.Image
	}
	return image.DockerName(i.Image)
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

// envList is an environment in Docker's KEY=VALUE form, sorted, with the
// names given without a value as they were given (in place of a value the
// image may set).
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
