// Command slopbox-spawn is slopbox's spawn server and sandbox init, built
// on its own so that what runs once per sandbox is a small program. The
// slopbox binary embeds it (make build); it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/slopbox/slopbox/internal/reexec"
	_ "github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

func main() {
	reexec.Init()
	fmt.Fprintln(os.Stderr, "slopbox-spawn is started by slopbox; it is not meant to be run by hand")
	os.Exit(2)
}
