package backend

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type fakeBackend struct{ name string }

func (f fakeBackend) Name() string { return f.name }
func (f fakeBackend) Close()       {}
func (f fakeBackend) Spawn(context.Context, SpawnSpec) (Sandbox, error) {
	return nil, errors.New("not implemented")
}

func TestRegistry(t *testing.T) {
	Register("test-registry-b", func() (Backend, error) { return fakeBackend{"test-registry-b"}, nil })
	Register("test-registry-a", func() (Backend, error) { return nil, errors.New("boom") })

	b, err := Open("test-registry-b")
	if err != nil || b.Name() != "test-registry-b" {
		t.Fatalf("Open: %v %v", b, err)
	}
	if _, err := Open("test-registry-a"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("factory error lost: %v", err)
	}
	_, err = Open("x")
	want := `unknown backend "x" (known: ` + strings.Join(Names(), ", ") + ")"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if !strings.Contains(want, "test-registry-a, test-registry-b") {
		t.Fatalf("names not sorted: %s", want)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	Register("test-registry-b", func() (Backend, error) { return nil, nil })
}

func TestCheckPolicyMounts(t *testing.T) {
	for _, c := range []struct {
		src    string
		unsafe []string
		ok     bool
	}{
		{"/", nil, false}, {"/etc", nil, false}, {"/etc/", nil, false}, {"/proc/1/root", nil, false}, {"/sys", nil, false},
		{"/dev/null", nil, false}, {"/boot", nil, false}, {"/etc", []string{"mount=/etc"}, true},
		{"/etc/hostname", nil, true}, {"/home/u/data", nil, true}, {"data", nil, true}, {"/devices", nil, true},
	} {
		err := SpawnSpec{Mounts: []Mount{{Source: c.src, Target: "/m"}}, Unsafe: c.unsafe}.CheckPolicy()
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrUnsafe) {
			t.Errorf("mount of %q (allowed %v): %v", c.src, c.unsafe, err)
		}
	}
}
