//go:build slopbox_helper

package sandbox

import _ "embed"

// spawnHelper is the slopbox-spawn build (./internal/spawnd/slopbox-spawn)
// that make puts here before building with the slopbox_helper tag.
//
//go:embed slopbox-spawn.bin
var spawnHelper []byte

// spawnHelperID names the installed copy: the start of the binary's
// sha256, computed by make rather than at every start of slopbox.
//
//go:embed slopbox-spawn.bin.id
var spawnHelperID string

// monitorBinary is the static C monitor (./internal/spawnd/monitor.c) that
// make puts here: the process each detached main command keeps on the host.
//
//go:embed slopbox-monitor.bin
var monitorBinary []byte

// monitorBinaryID names its installed copy, as spawnHelperID.
//
//go:embed slopbox-monitor.bin.id
var monitorBinaryID string
