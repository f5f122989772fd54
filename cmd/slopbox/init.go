package main

import "github.com/slopbox/slopbox/internal/reexec"

// init runs before anything else: a copy of slopbox started to finish a
// user namespace set-up or to run a store helper does its job here and
// exits without reaching the CLI.
func init() { reexec.Init() }
