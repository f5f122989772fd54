// Command goapi is a harness written against slopbox's Go API, in a module
// of its own: it pulls an image, spawns a sandbox over a workspace, runs a
// command through the setup script, reads the result and cleans up.
//
//	go build -tags "seccomp netgo osusergo" -ldflags "-extldflags -static" .
//	./goapi IMAGE WORKSPACE
//
// The binary must be linked statically (with cgo, for libseccomp): it is
// bind-mounted into each sandbox as its init. Build it with the tag
// slopbox_helper (after `make helper` in slopbox's checkout) to embed
// slopbox's small spawn server instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/sandbox"
)

func main() {
	// First thing: in the copies of this program that slopbox starts as
	// its helpers, Init does their work and exits.
	sandbox.Init()

	root := flag.String("root", image.DefaultRoot(), "slopbox's store and state directory")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: goapi [--root DIR] IMAGE WORKSPACE")
		os.Exit(2)
	}
	if err := run(*root, flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "goapi:", err)
		os.Exit(1)
	}
}

func run(root, ref, workspace string) error {
	ctx := context.Background()
	b, err := sandbox.New(root)
	if err != nil {
		return err
	}
	defer b.Close() // stops the sandboxes kept ready for the next Spawn

	if _, err := b.Store().Pull(ctx, ref); err != nil {
		return err
	}
	sb, err := b.Spawn(ctx, backend.SpawnSpec{
		Image:     ref,
		Workspace: workspace, // mounted at /workspace
		Env:       map[string]string{"GREETING": "hello"},
		Setup:     backend.Setup{Commands: []string{"echo preparing"}},
	})
	if err != nil {
		return err
	}
	defer sb.Cleanup()

	res, err := sb.Exec(ctx, backend.ExecRequest{
		Shell:   "echo $GREETING from $(pwd) > out.txt; cat out.txt; exit 3",
		Timeout: time.Minute,
	})
	if err != nil {
		return err
	}
	fmt.Printf("setup: %s\n", strings.TrimSpace(res.SetupStdout))
	fmt.Printf("exit code: %d\n", res.ExitCode)
	fmt.Printf("timed out: %v\n", res.TimedOut)
	fmt.Printf("stdout: %s\n", strings.TrimSpace(res.Stdout))

	// A streamed command: output as it comes, in chunks, then the result.
	events, err := sb.Stream(ctx, backend.ExecRequest{Argv: []string{"cat", "/workspace/out.txt"}})
	if err != nil {
		return err
	}
	var streamed strings.Builder
	for ev := range events {
		switch ev.Kind {
		case backend.EventStdout:
			streamed.WriteString(ev.Data)
		case backend.EventFinished:
			fmt.Printf("streamed: %s\n", strings.TrimSpace(streamed.String()))
			fmt.Printf("stream finished: exit code %d\n", ev.Result.ExitCode)
		}
	}
	return nil
}
