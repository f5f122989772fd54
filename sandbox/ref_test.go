package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFindRefusesPaths: a ref is a name, an id or an id prefix, never a
// path. A record a sandbox wrote below its own directory (its upper
// directory is the sandbox's root filesystem, writable by it) is not read
// as a sandbox's through a ref with a slash or dots, such as an Engine API
// path whose {id} carries an escaped "/" (/containers/ID%2Fupper%2Fx).
func TestFindRefusesPaths(t *testing.T) {
	r := stateRoot{dir: t.TempDir()}
	id := "0123456789abcdef0123456789abcdef"
	planted := filepath.Join(r.dir, id, "upper", "x")
	if err := os.MkdirAll(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(planted, stateFile), []byte(`{"ID":"planted","Pid":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, stateFile), []byte(`{"ID":"root","Pid":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{id + "/upper/x", "./" + id + "/upper/x", id + "/../" + id + "/upper/x", ".", "..", ".names", "a\x00b"} {
		rec, err := r.find(ref)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("find(%q) = %+v, %v; want not found", ref, rec, err)
		}
	}
}
