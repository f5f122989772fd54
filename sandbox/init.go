package sandbox

import "github.com/slopbox/slopbox/internal/reexec"

// Init must be the first thing a program that uses this package does, in
// main (or in an init function) and in a test binary's TestMain: slopbox
// re-executes the program's own binary for its user-namespace helper and,
// without the embedded slopbox-spawn, as the sandboxes' init. In such a
// copy Init does the helper's work and exits; in every other process it
// returns at once. New refuses to open a Backend before it has run.
//
//	func main() {
//		sandbox.Init()
//		…
//	}
func Init() { reexec.Init() }
