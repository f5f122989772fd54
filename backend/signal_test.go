package backend

import (
	"errors"
	"syscall"
	"testing"
)

// TestParseSignal: docker kill -s, stop -s, STOPSIGNAL and runc kill read
// signals one way: numbers, names with or without SIG in any case, and
// real-time signals; anything else is an invalid argument.
func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{
		"9": syscall.SIGKILL, "KILL": syscall.SIGKILL, "SIGKILL": syscall.SIGKILL, "sigterm": syscall.SIGTERM,
		"term": syscall.SIGTERM, "Usr1": syscall.SIGUSR1, "HUP": syscall.SIGHUP, "RTMIN+3": 37, "SIGRTMIN+3": 37, "64": 64, "33": 33,
	} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "65", "BOGUS", "SIG", "KILL9"} {
		if _, err := ParseSignal(bad); err == nil || !errors.Is(err, ErrInvalidValue) {
			t.Errorf("ParseSignal(%q): %v, want an invalid value", bad, err)
		}
	}
}
