package backend

import (
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
