package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/slopbox/slopbox/sandbox"
)

// A hot verb built alone is the command the whole tree has under its
// name: the same use line, flags (names, shorthands, defaults, usage) and
// annotations (the exit status of its failures).
func TestHotVerbsMatchTheTree(t *testing.T) {
	root := &cobra.Command{Use: "slopbox"}
	root.AddCommand(allVerbs()...)
	flagsOf := func(c *cobra.Command) string {
		var b strings.Builder
		c.Flags().VisitAll(func(f *pflag.Flag) {
			b.WriteString(f.Name + "/" + f.Shorthand + "/" + f.DefValue + "/" + f.Usage + "\n")
		})
		return b.String()
	}
	for _, name := range slices.Sorted(maps.Keys(hotVerbs)) {
		hot := hotVerbs[name]()
		c, rest, err := root.Find([]string{name})
		if err != nil || len(rest) != 0 || c == root {
			t.Errorf("%s: the tree has no such verb (%v)", name, err)
			continue
		}
		if c.Name() != name || hot.Name() != name || c.Use != hot.Use {
			t.Errorf("%s: the tree's is %q, the hot one %q", name, c.Use, hot.Use)
		}
		if flagsOf(c) != flagsOf(hot) {
			t.Errorf("%s: flags differ:\ntree:\n%s\nhot:\n%s", name, flagsOf(c), flagsOf(hot))
		}
		if !maps.Equal(c.Annotations, hot.Annotations) {
			t.Errorf("%s: annotations %v in the tree, %v hot", name, c.Annotations, hot.Annotations)
		}
	}
}

func TestFirstVerb(t *testing.T) {
	gf := rootCommand().PersistentFlags()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "img"}, "run"},
		{[]string{"--root", "/r", "run", "img"}, "run"},
		{[]string{"--root=/r", "--policy", "p", "--insecure-registry", "h:5000", "exec", "x", "true"}, "exec"},
		{[]string{"--policy=p", "rm", "-f", "x"}, "rm"},
		{[]string{"--debug", "run"}, "--debug"}, // not a global flag: the whole tree, and cobra's error
		{[]string{"-h"}, "-h"},
		{[]string{"--root"}, ""},
		{[]string{"--root", "run"}, ""}, // run is --root's value
		{[]string{"--", "run"}, "--"},
		{nil, ""},
	} {
		if got := firstVerb(gf, tc.args); got != tc.want {
			t.Errorf("firstVerb(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestDockerArgs(t *testing.T) {
	gf := rootCommand().PersistentFlags()
	for _, tc := range []struct {
		args []string
		want []string // nil: not the docker spelling
	}{
		{[]string{"docker", "run", "img"}, []string{"run", "img"}},
		{[]string{"--root", "/r", "docker", "ps"}, []string{"--root", "/r", "ps"}},
		{[]string{"--policy", "docker", "run"}, nil}, // docker is --policy's value: run is the verb
		{[]string{"--root=/r", "docker", "ps"}, []string{"--root=/r", "ps"}},
		{[]string{"--insecure-registry", "h:5000", "docker", "pull", "h:5000/x"}, []string{"--insecure-registry", "h:5000", "pull", "h:5000/x"}},
		{[]string{"run", "docker"}, nil},
		{nil, nil},
	} {
		got, ok := dockerArgs(gf, tc.args)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("dockerArgs(%q) = %q, %v; want %q", tc.args, got, ok, tc.want)
		}
	}
}

// ps shows a sandbox as docker ps does: the command as dockerd lists it
// (an argument with a space in single quotes), quoted and cut to 20
// columns, the image without its digest, the id's first 12; whole with
// --no-trunc.
func TestPsRow(t *testing.T) {
	id := strings.Repeat("ab", 32)
	hex := strings.Repeat("0", 64)
	digest := "sha256:" + hex
	long := []string{"sh", "-c", "echo a long command line"}
	for _, tc := range []struct {
		image                   string
		command                 []string
		noTrunc                 bool
		wantID, wantImg, wantCm string
	}{
		{"busybox", []string{"sleep", "1000"}, false, id[:12], "busybox", `"sleep 1000"`},
		{"busybox@" + digest, long, false, id[:12], "busybox", `"sh -c 'echo a long …"`},
		{"registry:5000/x:1@" + digest, []string{"true"}, false, id[:12], "registry:5000/x:1", `"true"`},
		{digest, []string{"true"}, false, id[:12], hex[:12], `"true"`},
		{hex, []string{"true"}, false, id[:12], hex[:12], `"true"`},
		{"", nil, false, id[:12], "<no image>", `""`},
		// Wide characters take two columns: 19 columns, then the ellipsis.
		{"busybox", []string{"echo", "漢字漢字漢字漢字漢字"}, false, id[:12], "busybox", `"echo 漢字漢字漢字漢…"`},
		{"busybox@" + digest, long, true, id, "busybox@" + digest, `"sh -c 'echo a long command line'"`},
	} {
		r := row(sandbox.Info{ID: id, Image: tc.image, Command: tc.command, StateDir: t.TempDir()}, tc.noTrunc)
		if r.ID != tc.wantID || r.Image != tc.wantImg || r.Command != tc.wantCm {
			t.Errorf("row(%q, %q, noTrunc %v) = %q %q %q; want %q %q %q", tc.image, tc.command, tc.noTrunc, r.ID, r.Image, r.Command, tc.wantID, tc.wantImg, tc.wantCm)
		}
	}
}
