//go:build !slopbox_helper

package sandbox

// Built without the slopbox_helper tag: this binary is its own spawn server.
var (
	spawnHelper   []byte
	spawnHelperID string
)
