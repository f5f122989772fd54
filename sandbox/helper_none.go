//go:build !slopbox_helper

package sandbox

// Built without the slopbox_helper tag: this binary is its own spawn server.
// The monitor is then this binary too: its C constructor
// (internal/spawnd/monitor.c) runs before the Go runtime.
var (
	spawnHelper     []byte
	spawnHelperID   string
	monitorBinary   []byte
	monitorBinaryID string
)
