//go:build !cgo

package userns

const cgoStageOne = false
