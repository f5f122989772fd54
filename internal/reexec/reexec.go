// Package reexec lets a package run part of its work in a fresh copy of the
// current binary (for example inside a user namespace). Handlers register
// by name in init(); the program calls Init first thing in main (and test
// binaries in TestMain).
package reexec

import (
	"fmt"
	"os"

	"github.com/slopbox/slopbox/internal/userns"
)

// Env names the handler a child process must run.
const Env = "_SLOPBOX_REEXEC"

var handlers = map[string]func() int{}

// initialized records that Init ran in this process.
var initialized bool

// Initialized reports whether the program called Init: without it the
// user-namespace helper and the spawn server, which re-execute the
// program, would run its main instead of their own work.
func Initialized() bool { return initialized }

// Register makes f runnable as handler name. It panics on duplicates.
func Register(name string, f func() int) {
	if _, dup := handlers[name]; dup {
		panic("reexec: duplicate handler " + name)
	}
	handlers[name] = f
}

// Init completes user namespace set-up and, in a child started for a
// handler, runs it and exits. In every other process it returns at once.
func Init() {
	initialized = true
	userns.Init()
	name := os.Getenv(Env)
	if name == "" {
		return
	}
	os.Unsetenv(Env) // never leak into processes the handler starts
	f, ok := handlers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "slopbox: unknown re-exec handler %q\n", name)
		os.Exit(125)
	}
	os.Exit(f())
}
