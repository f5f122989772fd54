package lowerdirs

import (
	"slices"
	"testing"
)

func TestOf(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{nil, []string{}},
		{[]string{"a", "b", "c"}, []string{"c", "b", "a"}},
		{[]string{"base", "empty", "empty", "x", "empty"}, []string{"empty", "x", "base"}},
	} {
		if got := Of(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Of(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
