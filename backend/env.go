package backend

import (
	"os"
	"sort"
	"strings"
)

// DefaultPath is the PATH a command gets when no environment layer sets one.
// It is the value Docker (and runc's default spec) give a container whose
// image sets none, so a command finds sh, sleep, cat... the same way on
// every backend. (The Python local runtime left PATH unset and relied on
// CPython's os.defpath, "/bin:/usr/bin".)
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// MergeEnv layers environment maps, later layers winning, on top of the host
// environment when includeOS is set. The result is "KEY=VALUE" entries sorted
// by key, so the same inputs always give the same slice. PATH is set to
// DefaultPath when no layer (and not the host env, if included) sets it.
//
// Backends call it as MergeEnv(spec.IncludeOSEnv, spec.SpecEnv, spec.Env, req.Env).
func MergeEnv(includeOS bool, layers ...map[string]string) []string {
	merged := make(map[string]string)
	if includeOS {
		for _, kv := range os.Environ() {
			k, v, ok := strings.Cut(kv, "=")
			if ok && k != "" {
				merged[k] = v
			}
		}
	}
	for _, layer := range layers {
		for k, v := range layer {
			merged[k] = v
		}
	}
	if _, ok := merged["PATH"]; !ok {
		merged["PATH"] = DefaultPath
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, len(keys))
	for i, k := range keys {
		env[i] = k + "=" + merged[k]
	}
	return env
}

// LookupEnv returns the value of key in a "KEY=VALUE" list (the last entry
// wins, as in execve).
func LookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// ParseEnv reads "KEY=VALUE" entries (docker's -e, an Engine API Env)
// into a map, later entries winning: the one reading of them every
// surface uses. An entry with an empty key is refused, named as flag
// says ("-e", "Env"). A bare KEY is lookup's value of it (docker run -e
// KEY: the caller's environment), dropped when lookup has none; with a
// nil lookup it is refused.
func ParseEnv(flag string, entries []string, lookup func(string) (string, bool)) (map[string]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(entries))
	for _, kv := range entries {
		k, v, ok := strings.Cut(kv, "=")
		if k == "" || !ok && lookup == nil {
			return nil, InvalidValue("%s %q: want KEY=VALUE", flag, kv)
		}
		if !ok {
			if v, ok = lookup(k); !ok {
				continue
			}
		}
		env[k] = v
	}
	return env, nil
}

// ParseLabels reads "KEY=VALUE" labels (--label, a build's or a volume's
// or a network's labels); a bare KEY is an empty label, as Docker's, and
// an empty key is refused.
func ParseLabels(entries []string) (map[string]string, error) {
	labels := make(map[string]string, len(entries))
	for _, l := range entries {
		k, v, _ := strings.Cut(l, "=")
		if k == "" {
			return nil, InvalidValue("--label %q: want KEY=VALUE", l)
		}
		labels[k] = v
	}
	return labels, nil
}
