package dockercompat

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/internal/atomicfile"
)

// CreateRecord is what a create request asked for that the sandbox does
// not keep in the form Docker's inspect shows it; it is kept next to the
// sandbox's state (and goes with it).
type CreateRecord struct {
	Entrypoint []string          `json:",omitempty"` // the effective one: the request's, else the image's
	Binds      []string          `json:",omitempty"`
	Mounts     []MountRecord     `json:",omitempty"`
	Tmpfs      map[string]string `json:",omitempty"`
	GroupAdd   []string          `json:",omitempty"`
	// RestartPolicy and CpuShares can change (docker update).
	RestartPolicy RestartPolicy
	LogConfig     LogConfig
	CpuShares     int64            `json:",omitempty"`
	Healthcheck   *v1.HealthConfig `json:",omitempty"` // the effective one: the image's with the request's over it
	// EnvNames are the request's Env entries without "=": Docker keeps
	// them as given in Config.Env, and does not set them.
	EnvNames []string `json:",omitempty"`
	// Image is the image as the request named it (Docker's Config.Image).
	Image string `json:",omitempty"`
	// DNS, DNSSearch, DNSOptions and ExtraHosts as the create gave them.
	DNS, DNSSearch, DNSOptions, ExtraHosts []string `json:",omitempty"`
	Echoed
}

// MountRecord is a --mount (HostConfig.Mounts entry) as inspect echoes it.
type MountRecord struct {
	Type, Source, Target string
	ReadOnly             bool
}

const createdFile = "engine-create.json"

// createdLock serializes the read-modify-write of UpdateCreated.
var createdLock sync.Mutex

// SaveCreated keeps what the options asked for that the sandbox in dir
// does not keep in the form Docker's inspect shows it (the CLI's create
// and run and the Engine API's create all do). img is the image's config.
func (o *CreateOptions) SaveCreated(dir string, img v1.Config) error {
	c := CreateRecord{Binds: o.Volumes, Entrypoint: o.EffectiveEntrypoint(img.Entrypoint), GroupAdd: o.GroupAdd,
		RestartPolicy: o.RestartPolicy, LogConfig: o.LogConfig, CpuShares: o.CpuShares, Healthcheck: o.EffectiveHealthcheck(img.Healthcheck),
		EnvNames: o.EnvNames, Image: o.Image, Echoed: o.Echoed,
		DNS: o.DNS, DNSSearch: o.DNSSearch, DNSOptions: o.DNSOptions, ExtraHosts: o.ExtraHosts}
	if c.StopSignal == "" {
		c.StopSignal = img.StopSignal
	}
	for _, m := range o.Mounts {
		c.Mounts = append(c.Mounts, MountRecord{Type: m.Type, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, t := range o.Tmpfs {
		dst, opts, _ := strings.Cut(t, ":")
		if c.Tmpfs == nil {
			c.Tmpfs = map[string]string{}
		}
		c.Tmpfs[dst] = opts
	}
	return c.save(dir)
}

func (c CreateRecord) save(dir string) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	// Whole: it is rewritten (update, a link's removal) while inspect,
	// ps and the restart policy read it.
	return atomicfile.WriteVolatile(filepath.Join(dir, createdFile), bytes.NewReader(b), 0o600)
}

// LoadCreated reads it back, with Docker's defaults where the create said
// nothing (a container made before has no record at all).
func LoadCreated(dir string) CreateRecord {
	var c CreateRecord
	if b, err := os.ReadFile(filepath.Join(dir, createdFile)); err == nil {
		json.Unmarshal(b, &c)
	}
	if c.RestartPolicy.Name == "" {
		c.RestartPolicy.Name = "no"
	}
	if c.LogConfig.Type == "" {
		c.LogConfig.Type = "json-file"
	}
	if c.LogConfig.Config == nil {
		c.LogConfig.Config = map[string]string{}
	}
	return c
}

// UpdateCreated changes the record of the sandbox in dir (docker update).
func UpdateCreated(dir string, change func(*CreateRecord) error) error {
	createdLock.Lock()
	defer createdLock.Unlock()
	c := LoadCreated(dir)
	if err := change(&c); err != nil {
		return err
	}
	return c.save(dir)
}

// RestartCountFile holds how many times serve restarted a container per
// its restart policy (in its state directory).
const RestartCountFile = "engine-restarts.json"

// RestartCount is inspect's RestartCount of the sandbox in dir.
func RestartCount(dir string) int {
	var c struct{ RestartCount int }
	if b, err := os.ReadFile(filepath.Join(dir, RestartCountFile)); err == nil {
		json.Unmarshal(b, &c)
	}
	return c.RestartCount
}

// SetRestartCount records it, whole: inspect may read it at any moment.
func SetRestartCount(dir string, n int) error {
	b, _ := json.Marshal(map[string]int{"RestartCount": n})
	return atomicfile.WriteVolatile(filepath.Join(dir, RestartCountFile), bytes.NewReader(b), 0o600)
}

// HealthFile holds State.Health, as serve's healthcheck records it (in
// the sandbox's state directory).
const HealthFile = "engine-health.json"

// SaveHealth records State.Health (JSON) in dir whole, replacing what was
// there: an inspect that reads it meanwhile gets the old or the new, never
// an empty file (run 46: docker-py's wait on the health status met one,
// and inspect had no State.Health).
func SaveHealth(dir string, health []byte) error {
	return atomicfile.WriteVolatile(filepath.Join(dir, HealthFile), bytes.NewReader(health), 0o600)
}
