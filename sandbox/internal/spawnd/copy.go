package spawnd

import (
	"fmt"
	"os"

	"github.com/slopbox/slopbox/internal/copytar"
	"github.com/slopbox/slopbox/internal/reexec"
)

// CopyHelper is the re-exec handler that runs the sandbox's side of
// `slopbox cp` inside the sandbox, from the init binary bind-mounted there:
//
//	out PATH               write PATH as a tar stream to stdout
//	in DEST item|contents  extract the tar stream on stdin at DEST
//
// It runs as the sandbox's root, under its filter, and sees only its root.
const CopyHelper = "sandbox-cp"

func init() { reexec.Register(CopyHelper, copyMain) }

func copyMain() int {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) == 2 && args[0] == "out":
		dir, name := copytar.Source(args[1])
		err = copytar.Write(os.Stdout, dir, name, copytar.Options{})
	case len(args) == 3 && args[0] == "in":
		o := copytar.Options{UID: os.Getuid(), GID: os.Getgid()}
		var dir *os.File
		var rename string
		if dir, rename, err = copytar.Into(args[1], args[2] == "contents", o); err == nil {
			err = copytar.Extract(os.Stdin, dir, rename, o)
			dir.Close()
		}
	default:
		err = fmt.Errorf("usage: out PATH | in DEST item|contents")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
