package sandbox

import (
	"regexp"
	"testing"

	"github.com/slopbox/slopbox/oci"
)

func FuzzNameMatcher(f *testing.F) {
	h := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9.-]{0,62}$`)
	n := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	for _, s := range []string{"a", "", "-a", "a-b.c_d", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h.MatchString(s) != oci.ValidHostname(s) || n.MatchString(s) != validName(s) {
			t.Fatalf("%q", s)
		}
	})
}
