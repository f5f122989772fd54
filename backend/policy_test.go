package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckOpenedSource: a source checked by name follows its symlinks
// (the refusal names the symlink); one a backend opened is checked as the
// path of what it opened, resolved by nothing, with the same refusals and
// the same words.
func TestCheckOpenedSource(t *testing.T) {
	link := filepath.Join(t.TempDir(), "to-etc")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	m := Mount{Source: link, Target: "/h"}
	if err := CheckMountSource(m, nil); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "/etc through the symlink "+link+" (-v "+link+":/h)") {
		t.Errorf("by name, %s: %v, want a refusal naming the symlink", link, err)
	}
	if err := CheckOpenedSource(m, nil); err != nil {
		t.Errorf("opened, %s: %v, want it checked as it is (an opened path is no symlink)", link, err)
	}
	for _, src := range []string{"/", "/etc", "/proc/1/root"} {
		m := Mount{Source: src, Target: "/h", Flag: "--mount type=bind,source=" + src + ",target=/h"}
		byName, opened := CheckMountSource(m, nil), CheckOpenedSource(m, nil)
		if !errors.Is(opened, ErrUnsafe) || byName == nil || opened.Error() != byName.Error() || !strings.Contains(opened.Error(), "("+m.Flag+") exposes") {
			t.Errorf("%s: opened %v, by name %v: want the same refusal, naming the flag", src, opened, byName)
		}
	}
	if err := CheckOpenedSource(Mount{Source: "/etc", Target: "/h"}, []string{"mount=/etc"}); err != nil {
		t.Errorf("/etc allowed: %v", err)
	}
	if os.Geteuid() == 0 {
		m := Mount{Source: "/usr/share", Target: "/x", HandOver: true}
		if err := CheckOpenedSource(m, nil); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "system files") {
			t.Errorf("hand-over of /usr/share, opened: %v, want refused", err)
		}
	}
}
