package filters

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// TestDockerRules: each of Docker's filter rules, key by key (moby's
// api/types/filters): labels AND, other keys' values OR, keys AND.
func TestDockerRules(t *testing.T) {
	svc1 := map[string]string{"com.docker.compose.project": "proj", "com.docker.compose.service": "service_1"}
	svc2 := map[string]string{"com.docker.compose.project": "proj", "com.docker.compose.service": "service_2"}
	other := map[string]string{"com.docker.compose.project": "other", "com.docker.compose.service": "service_1"}
	// compose's own query (issue 41 case 0): project AND service.
	f, err := FromJSON(`{"label":["com.docker.compose.project=proj","com.docker.compose.service=service_1"]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		labels map[string]string
		want   bool
	}{{svc1, true}, {svc2, false}, {other, false}, {nil, false}} {
		if got := f.Labels("label", c.labels); got != c.want {
			t.Errorf("labels %v under %v: %v, want %v", c.labels, f, got, c.want)
		}
	}
	// The older form {"key":{"value":true}} reads the same.
	old, err := FromJSON(`{"label":{"com.docker.compose.project=proj":true,"com.docker.compose.service=service_1":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	if !old.Labels("label", svc1) || old.Labels("label", svc2) {
		t.Errorf("old form %v: labels do not AND", old)
	}
	// A key alone: present with any value.
	key := Args{"label": {"com.docker.compose.project"}}
	if !key.Labels("label", other) || key.Labels("label", map[string]string{"x": "y"}) {
		t.Error("label=KEY: want present with any value")
	}
	// label! excludes what matches all of its values.
	neg := Args{"label": {"com.docker.compose.project=proj"}, "label!": {"com.docker.compose.service=service_2"}}
	if !neg.LabelsMatch(svc1) || neg.LabelsMatch(svc2) || neg.LabelsMatch(other) {
		t.Error("label and label!: want svc1 only")
	}
	// Values of other keys OR; keys AND.
	or := Args{"status": {"running", "exited"}, "name": {"web"}}
	if !or.Exact("status", "running") || !or.Exact("status", "exited") || or.Exact("status", "created") {
		t.Error("status values: want OR")
	}
	if !or.Match("name", "/web-1") || or.Match("name", "/db") {
		t.Error("name: want a match within the name")
	}
	if !(Args{"name": {"^/web$"}}).Match("name", "/web") || (Args{"name": {"^/web$"}}).Match("name", "/web-1") {
		t.Error("name: want a regular expression as Docker's")
	}
	// No key: no filter.
	if !(Args{}).Labels("label", nil) || !(Args{}).Exact("status", "x") || !(Args{}).Match("name", "x") {
		t.Error("an absent key must not filter")
	}
}

func TestFromFlagsAndValidate(t *testing.T) {
	f, err := FromFlags([]string{"label=a=b", "label=c", "status=running"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Get("label"); len(got) != 2 || got[0] != "a=b" || got[1] != "c" {
		t.Errorf("label values %q", got)
	}
	if _, err := FromFlags([]string{"label"}); !errors.Is(err, backend.ErrInvalidValue) {
		t.Errorf("a flag without =: %v, want an invalid value", err)
	}
	if err := f.Validate("label"); !errors.Is(err, backend.ErrInvalidValue) || err.Error() == "" {
		t.Errorf("unknown key status: %v", err)
	}
	if err := f.Validate("label", "status"); err != nil {
		t.Errorf("known keys: %v", err)
	}
	if _, err := FromJSON(`{"label":`); !errors.Is(err, backend.ErrInvalidValue) {
		t.Errorf("bad JSON: %v", err)
	}
	if _, _, err := (Args{"dangling": {"maybe"}}).Bool("dangling"); err == nil {
		t.Error("dangling=maybe accepted")
	}
	if _, _, err := (Args{"dangling": {"true", "false"}}).Bool("dangling"); err == nil {
		t.Error("dangling=true and false accepted")
	}
}

func TestTimestamp(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for in, want := range map[string]time.Time{
		"10m":                  now.Add(-10 * time.Minute),
		"1600000000":           time.Unix(1_600_000_000, 0),
		"1600000000.5":         time.Unix(1_600_000_000, 500_000_000),
		"2023-11-14T22:13:20Z": time.Unix(1_700_000_000, 0),
	} {
		got, err := Timestamp(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("Timestamp(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := Timestamp("yesterday", now); err == nil {
		t.Error("yesterday accepted")
	}
}

// TestReviewFindings: what a reviewer's attack found after the first
// version, each a prune that removed more than asked (or a CPU cost).
func TestReviewFindings(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	// until=0 is the epoch (Docker's GetTimestamp), not "now".
	if got, err := Timestamp("0", now); err != nil || !got.Equal(time.Unix(0, 0)) {
		t.Errorf("Timestamp(0) = %v, %v; want the epoch", got, err)
	}
	// More than one until is refused, as moby's prune refuses it.
	if _, _, err := (Args{"until": {"24h", "1s"}}).Until("until", now); !errors.Is(err, backend.ErrInvalidValue) {
		t.Errorf("two until values: %v, want a refusal", err)
	}
	// The old form's false values still filter.
	old, err := FromJSON(`{"label!":{"keep=yes":false}}`)
	if err != nil || !old.Has("label!") || old.LabelsMatch(map[string]string{"keep": "yes"}) {
		t.Errorf("old form with false: %v %v, want label!=keep=yes kept", old, err)
	}
	// The CLI trims keys and values, as Docker's ParseFlag.
	f, err := FromFlags([]string{"label!= keep=yes"})
	if err != nil || f.LabelsMatch(map[string]string{"keep": "yes"}) {
		t.Errorf("--filter 'label!= keep=yes': %v %v", f, err)
	}
	// Bounded: values and their size.
	many := make([]string, 300)
	for i := range many {
		many[i] = "n"
	}
	if _, err := FromFlags(append([]string(nil), prefixed("name=", many)...)); err == nil {
		t.Error("300 filter values accepted")
	}
	if _, err := FromJSON(`{"name":["` + strings.Repeat("a", 5000) + `"]}`); err == nil {
		t.Error("a 5000-byte filter value accepted")
	}
	// A value that is no regular expression matches only itself.
	m := (Args{"name": {"web(", "^/db$"}}).Matcher("name")
	if !m("web(") || m("/web") || !m("/db") || m("/db-1") {
		t.Error("Matcher: want exact or regexp, an invalid one exact only")
	}
}

func prefixed(p string, vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = p + v
	}
	return out
}
