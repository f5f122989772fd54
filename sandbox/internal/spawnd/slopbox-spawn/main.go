// Command slopbox-spawn is slopbox's spawn server and sandbox init, built
// on its own so that what runs once per sandbox is a small program. The
// slopbox binary embeds it (make build); it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/slopbox/slopbox/internal/reexec"
	_ "github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// The main goroutine keeps the main thread. Goroutines that enter a
// sandbox's namespaces (the claim) or a private mount namespace
// (libcontainer's sealing of its binary) lock their thread and end with it;
// on the main thread, which Go never ends, that left the process's own
// namespaces (/proc/PID/ns/*, what nsenter -t PID enters) those of a
// sandbox for good.
func init() { runtime.LockOSThread() }

func main() {
	reexec.Init()
	fmt.Fprintln(os.Stderr, "slopbox-spawn is started by slopbox; it is not meant to be run by hand")
	os.Exit(2)
}
