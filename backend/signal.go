package backend

import (
	"strconv"
	"syscall"

	"github.com/moby/sys/signal"
)

// ParseSignal reads a signal as docker kill -s, docker stop -s, a
// STOPSIGNAL and runc kill read one: a number (1 to 64) or a name with or
// without SIG, in any case (KILL, sigterm, RTMIN+3), by moby's signal map.
// A signal the platform has not is refused with dockerd's words.
func ParseSignal(s string) (syscall.Signal, error) {
	sig, err := signal.ParseSignal(s)
	if err != nil || !signal.ValidSignalForPlatform(sig) {
		if n, err := strconv.Atoi(s); err == nil && n > 0 && n <= 64 {
			return syscall.Signal(n), nil // a real-time signal by number
		}
		return 0, InvalidValue("invalid signal: %s (e.g. KILL, TERM, HUP, 15)", s)
	}
	return sig, nil
}
