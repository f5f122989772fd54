//go:build slopbox_helper

package sandbox

import _ "embed"

// spawnHelper is the slopbox-spawn build (./internal/spawnd/slopbox-spawn)
// that make puts here before building with the slopbox_helper tag.
//
//go:embed slopbox-spawn.bin
var spawnHelper []byte
