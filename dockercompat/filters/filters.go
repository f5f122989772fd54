// Package filters is Docker's list filters, once for every surface: the
// Engine API's `filters` parameter (both of its JSON forms) and the CLI's
// repeated `--filter KEY=VALUE`, read into one Args, matched by Docker's
// rules (moby's api/types/filters):
//
//   - values of one key OR (status=running and status=exited lists both),
//     and different keys AND;
//   - except labels: every `label` value must hold (label=a and label=b
//     lists only what has both), and `label!` excludes what matches all of
//     its values, as compose and prune rely on;
//   - an unknown key is refused (400), never ignored: a filter that is
//     silently dropped widens a list, and a prune removes more than asked.
package filters

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// Args are filters by key, each key's values in the order given.
type Args map[string][]string

// FromJSON reads the Engine API's filters parameter: {"key":["value"]},
// or the older {"key":{"value":true}}. An empty string is no filter.
func FromJSON(s string) (Args, error) {
	if s == "" {
		return Args{}, nil
	}
	var a Args
	if err := json.Unmarshal([]byte(s), &a); err == nil {
		if a == nil {
			a = Args{}
		}
		return a, a.bounded()
	}
	var old map[string]map[string]bool
	if err := json.Unmarshal([]byte(s), &old); err != nil {
		return nil, backend.InvalidValue("invalid filters %q: want {\"key\":[\"value\"]}", s)
	}
	// Every value counts, true or false: moby's Args keeps each key of
	// the old form, and a filter dropped would widen a list or a prune.
	a = Args{}
	for k, vs := range old {
		for v := range vs {
			a[k] = append(a[k], v)
		}
		sort.Strings(a[k])
	}
	return a, a.bounded()
}

// Bounds on a filter, so that its regular expressions (name, id) cost
// little: Docker sets none, but a request may hold 1 MiB of them.
const (
	maxValues     = 256
	maxValueBytes = 4096
)

// bounded refuses filters past maxValues values or maxValueBytes a value.
func (a Args) bounded() error {
	n := 0
	for k, vs := range a {
		n += len(vs)
		for _, v := range vs {
			if len(v) > maxValueBytes {
				return backend.InvalidValue("invalid filter '%s': a value is over %d bytes", k, maxValueBytes)
			}
		}
	}
	if n > maxValues {
		return backend.InvalidValue("invalid filters: %d values, more than the %d slopbox takes", n, maxValues)
	}
	return nil
}

// FromFlags reads the CLI's --filter values, each KEY=VALUE (the value may
// hold '=' itself: label=KEY=VALUE).
func FromFlags(flags []string) (Args, error) {
	a := Args{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, backend.InvalidValue("bad format of filter %q (expected name=value)", f)
		}
		// Docker's ParseFlag trims both: "label!= keep=yes" is keep=yes.
		a.Add(strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v))
	}
	return a, a.bounded()
}

// Add appends a value to key.
func (a Args) Add(key, value string) { a[key] = append(a[key], value) }

// Has reports whether key has any value.
func (a Args) Has(key string) bool { return len(a[key]) > 0 }

// Get is key's values.
func (a Args) Get(key string) []string { return a[key] }

// Validate refuses any key not in accepted, with Docker's message.
func (a Args) Validate(accepted ...string) error {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(accepted, k) {
			return backend.InvalidValue("invalid filter '%s' (this list takes %s)", k, strings.Join(accepted, ", "))
		}
	}
	return nil
}

// Exact reports whether key is unset or one of its values is v (OR).
func (a Args) Exact(key, v string) bool {
	vs := a[key]
	return len(vs) == 0 || slices.Contains(vs, v)
}

// Any reports whether key is unset or match holds for one of its values.
func (a Args) Any(key string, match func(value string) bool) bool {
	vs := a[key]
	return len(vs) == 0 || slices.ContainsFunc(vs, match)
}

// Matcher is Docker's Match for key, its values compiled once: it holds
// when key is unset, or one of its values equals the source or, read as a
// regular expression, matches within it (name=web lists "web-1",
// name=^/web$ only "web"). A value that is no regular expression matches
// only itself, as Docker's.
func (a Args) Matcher(key string) func(source string) bool {
	vs := a[key]
	if len(vs) == 0 {
		return func(string) bool { return true }
	}
	var res []*regexp.Regexp
	for _, v := range vs {
		if re, err := regexp.Compile(v); err == nil {
			res = append(res, re)
		}
	}
	return func(source string) bool {
		return slices.Contains(vs, source) || slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(source) })
	}
}

// Match is Matcher(key)(source), for one source.
func (a Args) Match(key, source string) bool { return a.Matcher(key)(source) }

// Prefix reports whether key is unset or one of its values is a prefix of
// source (ids, as Docker matches them: a short id names its object).
func (a Args) Prefix(key, source string) bool {
	return a.Any(key, func(v string) bool { return v != "" && strings.HasPrefix(source, v) })
}

// Labels is Docker's MatchKVList: key unset, or every one of its values
// holds in labels, a value being KEY (present) or KEY=VALUE (equal).
func (a Args) Labels(key string, labels map[string]string) bool {
	for _, v := range a[key] {
		k, want, has := strings.Cut(v, "=")
		got, ok := labels[k]
		if !ok || has && got != want {
			return false
		}
	}
	return true
}

// LabelsMatch applies `label` and `label!` together, as Docker's prune
// and lists do: every `label` holds, and not every `label!` does.
func (a Args) LabelsMatch(labels map[string]string) bool {
	if !a.Labels("label", labels) {
		return false
	}
	return !a.Has("label!") || !a.Labels("label!", labels)
}

// Bool reads key as Docker's boolean filters (dangling=true|false|1|0):
// set reports whether it was given; values that disagree or are not
// booleans are refused.
func (a Args) Bool(key string) (value, set bool, err error) {
	for _, v := range a[key] {
		var b bool
		switch strings.ToLower(v) {
		case "true", "1":
			b = true
		case "false", "0":
		default:
			return false, false, backend.InvalidValue("invalid filter '%s=%s': want true or false", key, v)
		}
		if set && b != value {
			return false, false, backend.InvalidValue("invalid filter '%s': both true and false given", key)
		}
		value, set = b, true
	}
	return value, set, nil
}

// Until reads key (`until`) as Docker's timestamps: a Unix time with
// optional fraction, RFC 3339 (with or without zone), a date, or a Go
// duration back from now ("10m"). More than one value is refused, as
// moby's prune refuses it.
func (a Args) Until(key string, now time.Time) (t time.Time, set bool, err error) {
	if len(a[key]) > 1 {
		return time.Time{}, false, backend.InvalidValue("invalid filter: more than one %s filter specified", key)
	}
	for _, v := range a[key] {
		u, err := Timestamp(v, now)
		if err != nil {
			return time.Time{}, false, backend.InvalidValue("invalid filter '%s=%s': %v", key, v, err)
		}
		if !set || u.After(t) {
			t, set = u, true
		}
	}
	return t, set, nil
}

// Timestamp reads one of Docker's time arguments (filters' until, logs'
// and events' --since and --until): a duration back from now, a Unix time
// in seconds with an optional fraction, or an RFC 3339 time or date.
func Timestamp(v string, now time.Time) (time.Time, error) {
	// "0" is the Unix epoch, not a duration of nothing back from now (a
	// prune until=0 removes nothing, as Docker's GetTimestamp reads it).
	if d, err := time.ParseDuration(v); err == nil && v != "0" {
		return now.Add(-d), nil
	}
	sec, frac, hasFrac := strings.Cut(v, ".")
	if s, err := strconv.ParseInt(sec, 10, 64); err == nil {
		if !hasFrac {
			return time.Unix(s, 0), nil
		}
		if n, err := strconv.ParseUint(frac, 10, 64); err == nil && len(frac) <= 9 {
			for range 9 - len(frac) {
				n *= 10
			}
			return time.Unix(s, int64(n)), nil
		}
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("want a duration (10m), a Unix time (1700000000.5) or RFC 3339 (2006-01-02T15:04:05Z)")
}
