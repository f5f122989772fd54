package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/sandbox"
)

// This file holds what a create request may ask for beyond the sandbox's
// own settings, which this server keeps and acts on: the restart policy
// (honoured while serve runs), the log driver (recorded), the
// supplementary groups (GroupAdd, passed to the sandbox), CpuShares
// (recorded) and the healthcheck (run by serve, health.go).

// RestartPolicy is Docker's HostConfig.RestartPolicy.
type RestartPolicy struct {
	Name              string
	MaximumRetryCount int
}

// LogConfig is Docker's HostConfig.LogConfig.
type LogConfig struct {
	Type   string
	Config map[string]string
}

// HealthConfig is Docker's Config.Healthcheck; durations in nanoseconds.
type HealthConfig struct {
	Test        []string      `json:",omitempty"`
	Interval    time.Duration `json:",omitempty"`
	Timeout     time.Duration `json:",omitempty"`
	StartPeriod time.Duration `json:",omitempty"`
	Retries     int           `json:",omitempty"`
}

// extraConfig is kept next to the sandbox's state (engine-extra.json).
type extraConfig struct {
	RestartPolicy RestartPolicy
	LogConfig     LogConfig
	GroupAdd      []string      `json:",omitempty"`
	CpuShares     int64         `json:",omitempty"`
	Healthcheck   *HealthConfig `json:",omitempty"`
}

// createExtra is the part of a create body read here.
type createExtra struct {
	Healthcheck *HealthConfig
	// Volumes are the anonymous volumes asked for (docker -v /path).
	Volumes    map[string]struct{}
	HostConfig struct {
		RestartPolicy RestartPolicy
		LogConfig     LogConfig
		GroupAdd      []string
		CpuShares     int64
		AutoRemove    bool
	}
}

const extraConfigFile = "engine-extra.json"

// extraLock serializes the read-modify-write of the extra files.
var extraLock sync.Mutex

func saveExtraConfig(dir string, c extraConfig) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, extraConfigFile), b, 0o600)
}

// loadExtraConfig reads it back: Docker's defaults for a container made by
// the slopbox CLI, which has none.
func loadExtraConfig(dir string) extraConfig {
	c := extraConfig{LogConfig: LogConfig{Type: "json-file"}}
	if b, err := os.ReadFile(filepath.Join(dir, extraConfigFile)); err == nil {
		json.Unmarshal(b, &c)
	}
	if c.RestartPolicy.Name == "" {
		c.RestartPolicy.Name = "no"
	}
	if c.LogConfig.Config == nil {
		c.LogConfig.Config = map[string]string{}
	}
	return c
}

// SetRestartPolicy records the restart policy of the container whose
// state directory is dir (slopbox update --restart).
func SetRestartPolicy(dir, policy string) error {
	p, err := ParseRestartPolicy(policy)
	if err != nil {
		return err
	}
	extraLock.Lock()
	defer extraLock.Unlock()
	c := loadExtraConfig(dir)
	c.RestartPolicy = p
	return saveExtraConfig(dir, c)
}

// ParseRestartPolicy reads the CLI's --restart: no, always,
// unless-stopped, on-failure[:N].
func ParseRestartPolicy(s string) (RestartPolicy, error) {
	name, n, hasN := strings.Cut(s, ":")
	p := RestartPolicy{Name: name}
	if hasN {
		v, err := strconv.Atoi(n)
		if err != nil {
			return p, invalidParameter("invalid restart policy %q: the maximum retry count must be a number", s)
		}
		p.MaximumRetryCount = v
	}
	return p, checkRestartPolicy(p, false)
}

// invalidParameter is a 400 with dockerd's message as it is (no prefix:
// clients match some of these words).
func invalidParameter(format string, a ...any) error {
	return &paramError{msg: fmt.Sprintf(format, a...)}
}

type paramError struct{ msg string }

func (e *paramError) Error() string        { return e.msg }
func (e *paramError) Is(target error) bool { return target == errBadRequest }

// checkRestartPolicy refuses what Docker's daemon refuses, with its words.
func checkRestartPolicy(p RestartPolicy, autoRemove bool) error {
	switch p.Name {
	case "", "no", "always", "unless-stopped":
		if p.MaximumRetryCount != 0 {
			return invalidParameter("invalid restart policy: maximum retry count can only be used with 'on-failure'")
		}
	case "on-failure":
		if p.MaximumRetryCount < 0 {
			return invalidParameter("invalid restart policy: maximum retry count cannot be negative")
		}
	default:
		return invalidParameter("invalid restart policy: unknown policy '%s'; use one of 'no', 'always', 'on-failure', or 'unless-stopped'", p.Name)
	}
	if autoRemove && p.Name != "" && p.Name != "no" {
		return invalidParameter("conflicting options: cannot specify both --restart and --rm")
	}
	return nil
}

// logOpts are the options each accepted log driver takes.
var logOpts = map[string][]string{
	"json-file": {"max-size", "max-file", "compress", "labels", "labels-regex", "env", "env-regex", "tag"},
	"local":     {"max-size", "max-file", "compress"},
	"none":      {},
}

// checkLogConfig accepts json-file (the default), local and none, with
// their options; it refuses another driver as a daemon without that
// plugin does.
func checkLogConfig(c *LogConfig) error {
	if c.Type == "" {
		c.Type = "json-file"
	}
	opts, ok := logOpts[c.Type]
	if !ok {
		return invalidParameter("logger: no log driver named '%s' is registered", c.Type)
	}
	for k := range c.Config {
		if !slices.Contains(opts, k) {
			return invalidParameter("unknown log opt '%s' for %s log driver", k, c.Type)
		}
	}
	return nil
}

// checkHealthcheck refuses what Docker's daemon refuses.
func checkHealthcheck(h *HealthConfig) error {
	if h == nil {
		return nil
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Interval", h.Interval}, {"Timeout", h.Timeout}, {"StartPeriod", h.StartPeriod}} {
		if d.v != 0 && d.v < time.Millisecond {
			return invalidParameter("%s in Healthcheck cannot be less than 1ms", d.name)
		}
	}
	if h.Retries < 0 {
		return invalidParameter("Retries in Healthcheck cannot be negative")
	}
	if len(h.Test) > 0 {
		switch h.Test[0] {
		case "NONE", "CMD", "CMD-SHELL":
		default:
			return invalidParameter("Healthcheck Test %q: want [\"CMD\", ...], [\"CMD-SHELL\", command] or [\"NONE\"]", h.Test)
		}
	}
	return nil
}

// readCreateExtra reads and checks the create body's extra settings, puts
// GroupAdd in spec and returns what to keep. The image's healthcheck
// applies when the request has none, its fields as defaults.
func readCreateExtra(body []byte, img *image.Image, spec *backend.SpawnSpec) (extraConfig, error) {
	var c createExtra
	if err := json.Unmarshal(body, &c); err != nil {
		return extraConfig{}, invalidParameter("invalid JSON in the request body: %v", err)
	}
	h := c.HostConfig
	if err := checkRestartPolicy(h.RestartPolicy, h.AutoRemove); err != nil {
		return extraConfig{}, err
	}
	if err := checkLogConfig(&h.LogConfig); err != nil {
		return extraConfig{}, err
	}
	if h.CpuShares < 0 {
		return extraConfig{}, invalidParameter("invalid CPU shares (%d): the minimum is 0", h.CpuShares)
	}
	health := c.Healthcheck
	if ih := img.Config.Config.Healthcheck; ih != nil {
		merged := HealthConfig{Test: ih.Test, Interval: ih.Interval, Timeout: ih.Timeout, StartPeriod: ih.StartPeriod, Retries: ih.Retries}
		if health != nil {
			if len(health.Test) > 0 {
				merged.Test = health.Test
			}
			merged.Interval = cmpOr(health.Interval, merged.Interval)
			merged.Timeout = cmpOr(health.Timeout, merged.Timeout)
			merged.StartPeriod = cmpOr(health.StartPeriod, merged.StartPeriod)
			merged.Retries = cmpOr(health.Retries, merged.Retries)
		}
		health = &merged
	}
	if err := checkHealthcheck(health); err != nil {
		return extraConfig{}, err
	}
	spec.GroupAdd = h.GroupAdd
	// An anonymous volume for each of Volumes no other mount or tmpfs
	// covers. It starts empty: the image's files there are not copied in
	// (dockerd copies them).
	for _, target := range slices.Sorted(maps.Keys(c.Volumes)) {
		covered := false
		for _, m := range spec.Mounts {
			covered = covered || path.Clean(m.Target) == path.Clean(target)
		}
		if !covered && !(spec.Limits.TmpBytes > 0 && path.Clean(target) == "/tmp") {
			spec.Mounts = append(spec.Mounts, backend.Mount{Target: target, AnonymousVolume: true})
		}
	}
	policy := h.RestartPolicy
	if policy.Name == "" {
		policy.Name = "no"
	}
	if h.LogConfig.Config == nil {
		h.LogConfig.Config = map[string]string{}
	}
	return extraConfig{RestartPolicy: policy, LogConfig: h.LogConfig, GroupAdd: h.GroupAdd, CpuShares: h.CpuShares, Healthcheck: health}, nil
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// inspectExtra adds the extra settings and their state to an inspect.
func (s *Server) inspectExtra(out map[string]any, dir, id string) map[string]any {
	c := loadExtraConfig(dir)
	hc, _ := out["HostConfig"].(map[string]any)
	if hc != nil {
		hc["RestartPolicy"] = c.RestartPolicy
		hc["LogConfig"] = c.LogConfig
		hc["GroupAdd"] = c.GroupAdd
		hc["CpuShares"] = c.CpuShares
	}
	if cfg, _ := out["Config"].(map[string]any); cfg != nil && c.Healthcheck != nil {
		cfg["Healthcheck"] = c.Healthcheck
	}
	out["RestartCount"] = restartCount(dir)
	if st, _ := out["State"].(map[string]any); st != nil {
		if s.isRestarting(id) {
			st["Restarting"] = true
			st["Status"] = "restarting"
		}
		if h := s.healthOf(id, dir, c.Healthcheck); h != nil {
			st["Health"] = h
		}
	}
	return out
}

// containerUpdate is POST /containers/{id}/update: resources (Memory,
// NanoCpus or CpuQuota/CpuPeriod, PidsLimit; CpuShares recorded) and the
// restart policy.
func (s *Server) containerUpdate(w http.ResponseWriter, r *request, sb *sandbox.Sandbox) {
	var body struct {
		Memory, MemorySwap, NanoCpus, CpuQuota, CpuPeriod int64
		CpuShares                                         *int64
		PidsLimit                                         *int64
		RestartPolicy                                     *RestartPolicy
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, 400, "invalid JSON in the request body: "+err.Error())
		return
	}
	info := sb.Info()
	extraLock.Lock()
	defer extraLock.Unlock()
	c := loadExtraConfig(info.StateDir)
	if p := body.RestartPolicy; p != nil {
		if err := checkRestartPolicy(*p, info.AutoRemove); err != nil {
			fail(w, err)
			return
		}
		if p.Name == "" {
			p.Name = "no"
		}
		c.RestartPolicy = *p
	}
	if body.CpuShares != nil {
		if *body.CpuShares < 0 {
			writeError(w, 400, fmt.Sprintf("invalid CPU shares (%d): the minimum is 0", *body.CpuShares))
			return
		}
		c.CpuShares = *body.CpuShares
	}
	l := info.Limits
	changed := false
	if body.Memory != 0 {
		l.MemoryBytes, changed = body.Memory, true
	}
	if body.NanoCpus != 0 {
		l.CPUs, changed = float64(body.NanoCpus)/1e9, true
	} else if body.CpuQuota != 0 || body.CpuPeriod != 0 {
		period := cmpOr(body.CpuPeriod, 100000)
		if body.CpuQuota > 0 {
			l.CPUs = float64(body.CpuQuota) / float64(period)
		} else {
			l.CPUs = 0
		}
		changed = true
	}
	if body.PidsLimit != nil {
		l.Pids, changed = max(*body.PidsLimit, 0), true
	}
	warnings := []string{}
	if changed {
		ws, err := sb.Update(l)
		if err != nil {
			fail(w, err)
			return
		}
		warnings = append(warnings, ws...)
		if len(info.Unenforced) > 0 {
			warnings = append(warnings, "limits not enforced on this host: "+fmt.Sprint(info.Unenforced))
		}
	}
	if err := saveExtraConfig(info.StateDir, c); err != nil {
		fail(w, err)
		return
	}
	s.emitContainer("update", info, nil)
	writeJSON(w, 200, map[string]any{"Warnings": warnings})
}
