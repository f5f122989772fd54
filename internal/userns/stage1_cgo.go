//go:build cgo

package userns

// stage1.c takes the stage-1 re-exec before the Go runtime starts.

// #cgo CFLAGS: -O2 -Wall
import "C"
