// Package dockercompat lets existing harness configs and docker-style
// command lines drive slopbox unchanged. This file set holds the
// SlopCodeBench environment specs (configs/environments/*.yaml): parsed
// with the same strictness (an unknown key is an error that names it and
// the keys that are valid there), with the same defaults, and turned into
// a backend.SpawnSpec. It depends on the backend interface only.
package dockercompat
