// Command slopbox is a rootless, daemonless container runtime with a
// docker-style command line. Each verb lives in its own file and only parses
// flags before calling a library package.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/image"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// globals are the flags every verb shares.
var globals struct {
	root     string
	insecure []string
	quiet    bool
	policy   string
	// rlmPolicy, when set, is the policy in force instead of the file's:
	// env run sets it for an rlm_code config (the operator's policy, its
	// roots narrowed by the config's).
	rlmPolicy *dockercompat.Policy
}

// exitError carries a process exit status through cobra.
// A silent one only passes on a command's own exit status.
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func main() {
	// The runc-compatible command line has runc's global flags (--root
	// is its state directory), so it parses on its own.
	if filepath.Base(os.Args[0]) == "slopbox-runc" {
		os.Exit(ociMain(os.Args[1:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "oci" {
		os.Exit(ociMain(os.Args[2:]))
	}
	root := rootCommand()
	// One argv parser for both spellings: invoked as `docker` (a symlink,
	// or `binary:` in a harness spec) or as `slopbox docker …`, the
	// arguments are the same verbs and flags.
	args := os.Args[1:]
	globalFlags := root.PersistentFlags()
	if a, ok := dockerArgs(globalFlags, args); ok {
		args = a
		root.SetArgs(args)
	}
	if verb, ok := hotVerbs[firstVerb(globalFlags, args)]; ok {
		root.AddCommand(verb())
	} else {
		root.AddCommand(allVerbs()...)
	}
	if filepath.Base(os.Args[0]) == "docker" {
		root.Use = "docker"
	}
	refuseUnknownVerbs(root)
	// Docker's exit codes: a flag it cannot parse is 125 for every verb.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitRuntime, err: fmt.Errorf("%w\nSee '%s --help'", err, c.CommandPath())}
	})
	if c, err := root.ExecuteC(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if !ee.silent {
				fmt.Fprintln(os.Stderr, "slopbox:", err)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "slopbox:", err)
		os.Exit(failureCode(c))
	}
}

// rootCommand is slopbox's root command with its global flags and no
// verbs yet.
func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "slopbox",
		Short:         "Rootless, daemonless containers for evaluation harnesses",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&globals.root, "root", image.DefaultRoot(), "store and state directory")
	root.PersistentFlags().StringVar(&globals.policy, "policy", os.Getenv("SLOPBOX_POLICY"), "sandbox policy file: allowed_mount_roots, allow_unsafe, allow_local, allow_host_network, allow_os_env (or an rlm_code config); default $SLOPBOX_POLICY, else "+defaultPolicy+" when present")
	root.PersistentFlags().StringSliceVar(&globals.insecure, "insecure-registry", nil, "allow plain HTTP for this registry (host:port); loopback registries always may")
	return root
}

// allVerbs builds every top-level command.
func allVerbs() []*cobra.Command {
	verbs := []*cobra.Command{pullCmd(), imagesCmd(), rmiCmd(), tagCmd(), inspectCmd(), loadCmd(), saveCmd(),
		runVerb(), createVerb(), startCmd(), execCmd(), psCmd(), killCmd(), stopCmd(), restartCmd(), rmCmd(), pruneCmd(),
		versionCmd(), infoCmd(), doctorCmd(), startsSandbox(envCmd()), imageCmd(),
		logsCmd(), diffCmd(), exportCmd(), historyCmd(), importCmd(), waitCmd(), renameCmd(), topCmd(), statsCmd(), cpCmd(), containerCmd(), portCmd(), pauseCmd("pause"), pauseCmd("unpause"), systemPruneCmd(), startsSandbox(snapshotCmd()), serveCmd(), buildCmd(), commitCmd(), pushCmd(), volumeCmd(), networkCmd(), updateCmd(), poolCmd()}
	for _, v := range packagingVerbs {
		verbs = append(verbs, v())
	}
	return verbs
}

// packagingVerbs are hidden verbs that only a packaging build has
// (manpages.go).
var packagingVerbs []func() *cobra.Command

func runVerb() *cobra.Command    { return startsSandbox(runCmd()) }
func createVerb() *cobra.Command { return startsSandbox(createCmd()) }

// hotVerbs are the verbs a harness runs over and over. Named first, one is
// built alone: the whole tree of commands and their flags is over half a
// megabyte of allocations, most of a run's start-up before its sandbox
// (TestHotVerbsMatchTheTree keeps each the same command as in the tree).
var hotVerbs = map[string]func() *cobra.Command{
	"run": runVerb, "create": createVerb, "start": startCmd, "exec": execCmd,
	"ps": psCmd, "stop": stopCmd, "kill": killCmd, "rm": rmCmd, "wait": waitCmd, "logs": logsCmd,
}

// firstVerb returns the first argument after the global flags (as cobra
// finds the verb), or "" when something else comes first: then every
// command is built, and cobra says what is wrong.
func firstVerb(flags *pflag.FlagSet, args []string) string {
	for i := 0; i < len(args); i++ {
		n := globalFlagArgs(flags, args[i])
		if n == 0 {
			return args[i]
		}
		i += n - 1
	}
	return ""
}

// globalFlagArgs returns how many arguments, from a on, are one of the
// global flags (the root's persistent flags): 2 for --root DIR, 1 for
// --root=DIR or a boolean flag, 0 for anything else.
func globalFlagArgs(flags *pflag.FlagSet, a string) int {
	name, _, inline := strings.Cut(strings.TrimPrefix(a, "--"), "=")
	if !strings.HasPrefix(a, "--") || name == "" {
		return 0
	}
	f := flags.Lookup(name)
	switch {
	case f == nil:
		return 0
	case inline || f.NoOptDefVal != "":
		return 1
	}
	return 2
}

// refuseUnknownVerbs makes every command group (container, image, system,
// env) refuse a verb it does not have as docker does: its unknown command
// message, exit 1. Alone, a group prints its help.
func refuseUnknownVerbs(root *cobra.Command) {
	for _, c := range root.Commands() {
		refuseUnknownVerbs(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return &exitError{code: 1, err: fmt.Errorf("unknown command: %s %s\n\nUsage:  %s\n\nRun '%s --help' for more information",
				cmd.CommandPath(), args[0], cmd.CommandPath(), cmd.CommandPath())}
		}
	}
}

// failureCode is the exit status of a command that failed itself: as
// Docker's CLI, 1 (no such container, a running one to remove, …), except
// for the verbs that start a sandbox, where 125 tells slopbox's failure
// from the command's own status (docker run's convention), as it does for
// slopbox's own env and snapshot verbs.
func failureCode(c *cobra.Command) int {
	for ; c != nil; c = c.Parent() {
		if c.Annotations[annotationExit] == "125" {
			return exitRuntime
		}
	}
	return 1
}

// annotationExit on a command (and its subcommands) sets failureCode.
const annotationExit = "slopbox.exit"

// startsSandbox marks c as a verb whose own failures exit 125.
func startsSandbox(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annotationExit] = "125"
	return c
}

// progressMode draws bars on a terminal (one with a width: a pty nobody
// sized cannot show them) and prints plain lines otherwise.
func progressMode() image.Progress {
	if w, _, err := term.GetSize(int(os.Stderr.Fd())); err == nil && w > 0 {
		return image.ProgressBars
	}
	return image.ProgressPlain
}

// openStore opens the image store with the global flags.
func openStore() (*image.Store, error) {
	return image.Open(globals.root,
		image.WithInsecureRegistries(globals.insecure...),
		image.WithProgress(progressMode()),
		image.WithLogger(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }))
}

// dockerArgs drops the word "docker" when it is the first argument that is
// not a global flag (slopbox [--root DIR] docker VERB ...).
func dockerArgs(flags *pflag.FlagSet, args []string) ([]string, bool) {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case globalFlagArgs(flags, a) == 2:
			i++ // its value
		case strings.HasPrefix(a, "-"):
		case a == "docker":
			return append(slices.Clone(args[:i]), args[i+1:]...), true
		default:
			return nil, false
		}
	}
	return nil, false
}
