package dockercompat

import (
	"fmt"
	"math"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// Echoed are Docker create options that inspect shows as the create gave
// them and that slopbox honours, checks or warns of (docs/engine-api.md,
// "Create fields"); they are kept in the CreateRecord. Each one is either
// honoured (Runtime runc, Init: the sandbox's PID 1 reaps, StopTimeout,
// VolumesFrom, VolumeDriver local, Isolation default, MemorySwap equal to
// Memory), refused as dockerd refuses a bad value, or accepted with a
// create warning saying it has no effect (CpusetCpus, CpusetMems, other
// MemorySwap values, MemorySwappiness, MacAddress).
type Echoed struct {
	CpusetCpus, CpusetMems string `json:",omitempty"`
	Runtime                string `json:",omitempty"`
	Isolation              string `json:",omitempty"`
	VolumeDriver           string `json:",omitempty"`
	// VolumesFrom are CONTAINER[:ro|rw]: that container's mounts, at the
	// same paths.
	VolumesFrom      []string `json:",omitempty"`
	Init             *bool    `json:",omitempty"`
	MemorySwap       int64    `json:",omitempty"`
	MemorySwappiness *int64   `json:",omitempty"`
	MacAddress       string   `json:",omitempty"`
	// StopTimeout is the stop grace period in seconds (docker stop without
	// -t, the Engine API's stop without t).
	StopTimeout *int `json:",omitempty"`
	// StopSignal is the signal stop sends first (--stop-signal,
	// Config.StopSignal); the record keeps the effective one, the
	// request's else the image's STOPSIGNAL.
	StopSignal string `json:",omitempty"`
	// Links are CONTAINER:ALIAS (HostConfig.Links, --link): the linked
	// container's name and environment in ALIAS_NAME, ALIAS_ENV_KEY.
	Links []string `json:",omitempty"`
}

// checkEchoed refuses what dockerd refuses of them, with its words, and
// warns of what has no effect here.
func (o *CreateOptions) checkEchoed(memory int64, volumes bool) (warnings []string, err error) {
	e := o.Echoed
	if err := e.checkPlatform(volumes); err != nil {
		return nil, err
	}
	cpus, err := e.checkCPUSet()
	if err != nil {
		return nil, err
	}
	swap, err := e.checkSwap(memory)
	if err != nil {
		return nil, err
	}
	mac, err := e.checkMAC()
	if err != nil {
		return nil, err
	}
	if err := e.checkStopAndRefs(); err != nil {
		return nil, err
	}
	return append(append(cpus, swap...), mac...), nil
}

// checkPlatform refuses a runtime but runc, an isolation but the
// default, and (when the container has volumes) a volume driver but
// local.
func (e Echoed) checkPlatform(volumes bool) error {
	switch e.Runtime {
	case "", "runc":
	default:
		return backend.InvalidValue("Unknown runtime specified %s (slopbox runs runc's libcontainer only)", e.Runtime)
	}
	switch strings.ToLower(e.Isolation) {
	case "", "default":
	default:
		return backend.InvalidValue("Invalid isolation: %q - linux only supports 'default'", e.Isolation)
	}
	if e.VolumeDriver != "" && e.VolumeDriver != "local" && volumes {
		return backend.InvalidValue("volume driver %q is not available: slopbox has the local driver only", e.VolumeDriver)
	}
	return nil
}

// checkCPUSet refuses a cpuset that is no CPU list and warns that one
// is not applied.
func (e Echoed) checkCPUSet() (warnings []string, err error) {
	for _, c := range []struct{ name, v string }{{"CpusetCpus", e.CpusetCpus}, {"CpusetMems", e.CpusetMems}} {
		if c.v == "" {
			continue
		}
		if !cpuList(c.v) {
			return nil, backend.InvalidValue("Invalid value %s for %s", c.v, strings.ToLower(c.name[:6])+"."+strings.ToLower(c.name[6:]))
		}
		warnings = append(warnings, fmt.Sprintf("%s %q is not applied: slopbox does not pin sandboxes to CPUs or memory nodes", c.name, c.v))
	}
	return warnings, nil
}

// checkSwap checks MemorySwap against the memory limit and
// MemorySwappiness as dockerd does, and warns that neither is applied.
func (e Echoed) checkSwap(memory int64) (warnings []string, err error) {
	switch s := e.MemorySwap; {
	case s == 0 || s == memory:
	case s > 0 && memory == 0:
		return nil, backend.InvalidValue("You should always set the Memory limit when using Memoryswap limit, see usage")
	case s > 0 && s < memory:
		return nil, backend.InvalidValue("Minimum memoryswap limit should be larger than memory limit, see usage")
	case s < -1:
		return nil, backend.InvalidValue("invalid MemorySwap %d", s)
	default:
		warnings = append(warnings, fmt.Sprintf("MemorySwap %d is not applied: a sandbox with a memory limit has no swap (its memory+swap limit is its memory limit)", s))
	}
	if p := e.MemorySwappiness; p != nil && *p != -1 {
		if *p < 0 || *p > 100 {
			return nil, backend.InvalidValue("Invalid value: %v, valid memory swappiness range is 0-100", *p)
		}
		warnings = append(warnings, fmt.Sprintf("MemorySwappiness %d is not applied: slopbox does not set it", *p))
	}
	return warnings, nil
}

// checkMAC refuses a MacAddress that is none and warns that one is not
// applied.
func (e Echoed) checkMAC() (warnings []string, err error) {
	if e.MacAddress != "" {
		if _, err := net.ParseMAC(e.MacAddress); err != nil {
			return nil, backend.InvalidValue("%s is not a valid mac address", e.MacAddress)
		}
		warnings = append(warnings, fmt.Sprintf("MacAddress %s is not applied: a sandbox's interface keeps the address its network gives it", e.MacAddress))
	}
	return warnings, nil
}

// checkStopAndRefs refuses a bad stop signal or timeout, a volumes-from
// mode but ro or rw, and a link that does not parse.
func (e Echoed) checkStopAndRefs() error {
	if e.StopSignal != "" {
		if _, err := backend.ParseSignal(e.StopSignal); err != nil {
			return err
		}
	}
	if t := e.StopTimeout; t != nil && *t < -1 {
		return backend.InvalidValue("invalid StopTimeout %d", *t)
	}
	for _, v := range e.VolumesFrom {
		if _, mode, ok := strings.Cut(v, ":"); ok && mode != "ro" && mode != "rw" {
			return backend.InvalidValue("invalid mode for volumes-from: %s", mode)
		}
	}
	for _, l := range e.Links {
		if _, _, err := ParseLink(l); err != nil {
			return err
		}
	}
	return nil
}

// cpuList is a cpuset list: 0-3,5.
func cpuList(v string) bool {
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.ParseUint(lo, 10, 16)
		b, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || isRange && (err2 != nil || b < a) {
			return false
		}
	}
	return true
}

// ParseLink reads a link, CONTAINER[:ALIAS] (the alias defaults to the
// container's name), as Docker's HostConfig.Links and --link give it.
func ParseLink(l string) (container, alias string, err error) {
	container, alias, _ = strings.Cut(l, ":")
	container = strings.TrimPrefix(container, "/")
	if alias == "" {
		alias = container
	}
	alias = strings.TrimPrefix(alias, "/")
	if container == "" || strings.ContainsAny(alias, "/ ") {
		return "", "", backend.InvalidValue("invalid link %q (want CONTAINER[:ALIAS])", l)
	}
	return container, alias, nil
}

// LinkEnv is what a link to a container named name, with environment env
// (KEY=VALUE), gives the linking container named self, as Docker's legacy
// links do: ALIAS_NAME=/self/alias and ALIAS_ENV_KEY=VALUE for each of
// the linked container's variables but HOME and PATH.
func LinkEnv(self, alias string, env []string) []string {
	prefix := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(alias))
	out := []string{prefix + "_NAME=" + path.Join("/", self, alias)}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "HOME" || k == "PATH" {
			continue
		}
		out = append(out, prefix+"_ENV_"+k+"="+v)
	}
	slices.Sort(out[1:])
	return out
}

// DefaultStopTimeout is docker stop's grace period in seconds when
// neither the stop nor the container's StopTimeout gives one.
const DefaultStopTimeout = 10

// StopGrace is docker stop's grace period for the container whose state
// directory is dir: t seconds when the stop gives it, else the
// container's StopTimeout, else DefaultStopTimeout; -1 waits for ever
// (as dockerd's), as near as a duration gets.
func StopGrace(dir string, t *int) time.Duration {
	n := DefaultStopTimeout
	if st := LoadCreated(dir).StopTimeout; st != nil {
		n = *st
	}
	if t != nil {
		n = *t
	}
	if n < 0 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(n) * time.Second
}

// StopSignal is the signal a stop of the container in dir sends first:
// the stop's own (stop -s, the Engine API's signal), else the
// container's (--stop-signal, Config.StopSignal, the image's STOPSIGNAL),
// else SIGTERM. A container's signal that does not parse is SIGTERM, as
// dockerd's (an image's STOPSIGNAL is not checked at create).
func StopSignal(dir, requested string) (syscall.Signal, error) {
	if requested != "" {
		return backend.ParseSignal(requested)
	}
	if s := LoadCreated(dir).StopSignal; s != "" {
		if sig, err := backend.ParseSignal(s); err == nil {
			return sig, nil
		}
	}
	return syscall.SIGTERM, nil
}

// ErrRemoveRunning is the refusal to remove a running container without
// force, in dockerd's words (clients match them).
func ErrRemoveRunning(id string) error {
	//lint:ignore ST1005 dockerd's words, which clients match
	return fmt.Errorf("You cannot remove a running container %s. Stop the container before attempting removal or force remove", id)
}
