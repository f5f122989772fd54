package dockercompat

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
)

// What a create may ask for beyond the sandbox's own settings, which
// slopbox records (Created) and serve acts on: the restart policy
// (honoured while serve runs), the log driver (recorded), CpuShares
// (recorded) and the healthcheck (run by serve). The errors are dockerd's
// words as they are: clients match some of them.

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

// ParseRestartPolicy reads the CLI's --restart: no, always,
// unless-stopped, on-failure[:N].
func ParseRestartPolicy(s string) (RestartPolicy, error) {
	name, n, hasN := strings.Cut(s, ":")
	p := RestartPolicy{Name: name}
	if hasN {
		v, err := strconv.Atoi(n)
		if err != nil {
			return p, backend.InvalidValue("invalid restart policy %q: the maximum retry count must be a number", s)
		}
		p.MaximumRetryCount = v
	}
	return p, CheckRestartPolicy(p, false)
}

// CheckRestartPolicy refuses what Docker's daemon refuses, with its words.
func CheckRestartPolicy(p RestartPolicy, autoRemove bool) error {
	switch p.Name {
	case "", "no", "always", "unless-stopped":
		if p.MaximumRetryCount != 0 {
			return backend.InvalidValue("invalid restart policy: maximum retry count can only be used with 'on-failure'")
		}
	case "on-failure":
		if p.MaximumRetryCount < 0 {
			return backend.InvalidValue("invalid restart policy: maximum retry count cannot be negative")
		}
	default:
		return backend.InvalidValue("invalid restart policy: unknown policy '%s'; use one of 'no', 'always', 'on-failure', or 'unless-stopped'", p.Name)
	}
	if autoRemove && p.Name != "" && p.Name != "no" {
		return backend.InvalidValue("conflicting options: cannot specify both --restart and --rm")
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
func checkLogConfig(c LogConfig) error {
	if c.Type == "" {
		c.Type = "json-file"
	}
	opts, ok := logOpts[c.Type]
	if !ok {
		return backend.InvalidValue("logger: no log driver named '%s' is registered", c.Type)
	}
	for k := range c.Config {
		if !slices.Contains(opts, k) {
			return backend.InvalidValue("unknown log opt '%s' for %s log driver", k, c.Type)
		}
	}
	return nil
}

// checkHealthcheck refuses what Docker's daemon refuses.
func checkHealthcheck(h *v1.HealthConfig) error {
	if h == nil {
		return nil
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Interval", h.Interval}, {"Timeout", h.Timeout}, {"StartPeriod", h.StartPeriod}} {
		if d.v != 0 && d.v < time.Millisecond {
			return backend.InvalidValue("%s in Healthcheck cannot be less than 1ms", d.name)
		}
	}
	if h.Retries < 0 {
		return backend.InvalidValue("Retries in Healthcheck cannot be negative")
	}
	if len(h.Test) > 0 {
		switch h.Test[0] {
		case "NONE", "CMD", "CMD-SHELL":
		default:
			return backend.InvalidValue("Healthcheck Test %q: want [\"CMD\", ...], [\"CMD-SHELL\", command] or [\"NONE\"]", h.Test)
		}
	}
	return nil
}

// EffectiveHealthcheck is the healthcheck a container runs: the image's
// with the options' fields over it, or the options' alone.
func (o *CreateOptions) EffectiveHealthcheck(image *v1.HealthConfig) *v1.HealthConfig {
	h := o.Healthcheck
	if image == nil {
		return h
	}
	merged := *image
	if h != nil {
		if len(h.Test) > 0 {
			merged.Test = h.Test
		}
		merged.Interval = cmp.Or(h.Interval, merged.Interval)
		merged.Timeout = cmp.Or(h.Timeout, merged.Timeout)
		merged.StartPeriod = cmp.Or(h.StartPeriod, merged.StartPeriod)
		merged.Retries = cmp.Or(h.Retries, merged.Retries)
	}
	return &merged
}
