package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/backend"
)

type contextT = context.Context

func execCmd() *cobra.Command {
	var ef execFlags
	var env []string
	var workdir, user string
	c := &cobra.Command{
		Use:   "exec [flags] SANDBOX COMMAND [ARG...]",
		Short: "Run a command in a running sandbox",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ef.validate(); err != nil {
				return err
			}
			if ef.tty && ef.interactive && !term.IsTerminal(int(os.Stdin.Fd())) {
				return &exitError{code: 1, err: errNotATTY}
			}
			b, err := openService()
			if err != nil {
				return err
			}
			sb, err := b.Open(args[0])
			if err != nil {
				return err
			}
			envMap, err := parseEnv(env)
			if err != nil {
				return err
			}
			req := backend.ExecRequest{Argv: args[1:], Env: envMap, Cwd: workdir, User: user, Timeout: seconds(ef.timeout), NoSetup: true}
			code, err := runIn(cmd, sb, req, ef)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code, silent: true}
			}
			return nil
		},
	}
	c.Flags().SetInterspersed(false)
	ef.register(c)
	c.Flags().StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE")
	c.Flags().StringVarP(&workdir, "workdir", "w", "", "working directory")
	c.Flags().StringVarP(&user, "user", "u", "", "user: name|uid[:group|gid]")
	return c
}
