package engine

import (
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestDetachReader: the detach keys end the input, however the client's
// writes split them; the bytes of a sequence that breaks off pass on as
// typed, a key that restarts it included; bad sequences are refused.
func TestDetachReader(t *testing.T) {
	for _, c := range []struct {
		keys, in, out string
		detached      bool
	}{
		{"", "abc\x10\x11rest", "abc", true},
		{"", "a\x10b\x10\x10\x11", "a\x10b\x10", true},
		{"", "a\x10", "a", false}, // held at the end of the input
		{"ctrl-x", "hi\x18", "hi", true},
		{"ctrl-p,a", "\x10b\x10a", "\x10b", true},
		{"ctrl-@,ctrl-_", "x\x00\x1f", "x", true},
		{"q", "abc", "abc", false},
	} {
		keys, err := parseDetachKeys(c.keys)
		if err != nil {
			t.Fatalf("%q: %v", c.keys, err)
		}
		for _, r := range []io.Reader{&stringReader{s: c.in}, iotest.OneByteReader(&stringReader{s: c.in})} {
			d := &detachReader{r: r, keys: keys}
			got, err := io.ReadAll(d)
			if string(got) != c.out || errors.Is(err, errDetached) != c.detached || d.detached != c.detached {
				t.Errorf("keys %q input %q: %q %v, want %q detached %v", c.keys, c.in, got, err, c.out, c.detached)
			}
		}
	}
	for _, bad := range []string{"ctrl-", "ctrl-1", "ab", "ctrl-p,", "ctrl-pp"} {
		if _, err := parseDetachKeys(bad); !errors.Is(err, errBadRequest) {
			t.Errorf("parseDetachKeys(%q): %v, want a bad request", bad, err)
		}
	}
}

type stringReader struct{ s string }

func (r *stringReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}
