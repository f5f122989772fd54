// Package backendkit holds what the backends (sandbox/, local/) share to
// run commands the same way: output collection (bounded drain, caps,
// UTF-8, the split marker), the one-command Slot, and Exec/Stream built
// from a backend's start and wait. It is not public API: callers use the
// backend package's interface. TestOnlyBackendsImportKit keeps it so.
package backendkit
