package spawnd

// The container init (agent.c) is compiled into every binary that imports
// this package; it takes over in a C constructor, before the Go runtime
// starts, when libcontainer execs the binary as a sandbox's PID 1.

// #cgo CFLAGS: -O2 -Wall
import "C"
