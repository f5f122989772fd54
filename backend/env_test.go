package backend

import (
	"errors"
	"maps"
	"reflect"
	"testing"
)

func TestMergeEnvPrecedence(t *testing.T) {
	got := MergeEnv(false,
		map[string]string{"A": "spec", "B": "spec", "C": "spec"},
		map[string]string{"B": "spawn", "C": "spawn"},
		map[string]string{"C": "exec"},
	)
	want := []string{"A=spec", "B=spawn", "C=exec", "PATH=" + DefaultPath}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestMergeEnvPath(t *testing.T) {
	if v, _ := LookupEnv(MergeEnv(false, map[string]string{"PATH": "/x"}), "PATH"); v != "/x" {
		t.Fatalf("PATH %q", v)
	}
	if v, _ := LookupEnv(MergeEnv(false), "PATH"); v != DefaultPath {
		t.Fatalf("default PATH %q", v)
	}
}

func TestMergeEnvHost(t *testing.T) {
	t.Setenv("SLOPBOX_TEST_HOST", "host")
	t.Setenv("SLOPBOX_TEST_OVER", "host")
	env := MergeEnv(true, map[string]string{"SLOPBOX_TEST_OVER": "spec"})
	if v, _ := LookupEnv(env, "SLOPBOX_TEST_HOST"); v != "host" {
		t.Fatalf("host var missing: %q", v)
	}
	if v, _ := LookupEnv(env, "SLOPBOX_TEST_OVER"); v != "spec" {
		t.Fatalf("spec must beat host: %q", v)
	}
	if _, ok := LookupEnv(MergeEnv(false), "SLOPBOX_TEST_HOST"); ok {
		t.Fatal("host env leaked without includeOS")
	}
}

func TestMergeEnvDeterministic(t *testing.T) {
	layer := map[string]string{}
	for _, k := range []string{"Z", "A", "M", "B", "Y"} {
		layer[k] = k
	}
	first := MergeEnv(false, layer)
	for i := 0; i < 20; i++ {
		if !reflect.DeepEqual(MergeEnv(false, layer), first) {
			t.Fatal("order changed between calls")
		}
	}
}

// ParseEnv is the one reading of KEY=VALUE entries: an empty key refused
// (named by its flag), a bare KEY looked up (dropped when unset) or, with
// no lookup, refused; later entries win.
func TestParseEnv(t *testing.T) {
	host := func(k string) (string, bool) { v, ok := map[string]string{"HOSTED": "h"}[k]; return v, ok }
	got, err := ParseEnv("-e", []string{"A=1", "B=x=y", "HOSTED", "UNSET", "A=2", "EMPTY="}, host)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "2", "B": "x=y", "HOSTED": "h", "EMPTY": ""}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, tc := range []struct {
		entries []string
		lookup  func(string) (string, bool)
		msg     string
	}{
		{[]string{"=v"}, host, `-e "=v": want KEY=VALUE`},
		{[]string{"BARE"}, nil, `Env "BARE": want KEY=VALUE`},
	} {
		flag := "-e"
		if tc.lookup == nil {
			flag = "Env"
		}
		_, err := ParseEnv(flag, tc.entries, tc.lookup)
		if err == nil || err.Error() != tc.msg || !errors.Is(err, ErrInvalidValue) {
			t.Errorf("%q: %v, want %q (an invalid value)", tc.entries, err, tc.msg)
		}
	}
	if got, err := ParseEnv("-e", nil, host); got != nil || err != nil {
		t.Errorf("no entries: %v %v, want nil", got, err)
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels([]string{"a=1", "bare", "c=x=y"})
	if want := map[string]string{"a": "1", "bare": "", "c": "x=y"}; err != nil || !maps.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	if _, err := ParseLabels([]string{"=x"}); err == nil || !errors.Is(err, ErrInvalidValue) {
		t.Errorf("an empty key: %v, want refused", err)
	}
}
