package main

import (
	"fmt"
	"github.com/slopbox/slopbox/backend"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/imagebuild"
	"github.com/slopbox/slopbox/internal/atomicfile"
)

// buildCmd is docker build (the classic builder's output), without a
// daemon: see package build.
func buildCmd() *cobra.Command {
	var (
		o                   imagebuild.Options
		args, labels        []string
		quiet               bool
		iidfile, dockerfile string
	)
	c := &cobra.Command{
		Use:   "build [flags] CONTEXT|-",
		Short: "Build an image from a Dockerfile",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			o.BuildArgs = map[string]string{}
			for _, a := range args {
				k, v, ok := strings.Cut(a, "=")
				if !ok {
					v, ok = os.LookupEnv(k)
				}
				if ok {
					o.BuildArgs[k] = v
				}
			}
			var err error
			if o.Labels, err = backend.ParseLabels(labels); err != nil {
				return err
			}
			if o.Network == "default" {
				o.Network = ""
			}
			o.ContextDir, o.Dockerfile = pos[0], dockerfile
			if pos[0] == "-" {
				dir, df, remove, err := imagebuild.ContextFromTar(os.Stdin)
				if err != nil {
					return err
				}
				defer remove()
				o.ContextDir, o.DockerfileContent = dir, df
			}
			if dockerfile == "-" {
				return fmt.Errorf("-f -: give the Dockerfile inside the context, or the context as -")
			}
			if !quiet {
				o.Out = cmd.OutOrStdout()
			}
			b, err := openService()
			if err != nil {
				return err
			}
			defer b.Close()
			res, err := b.Builder().Build(cmd.Context(), o)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if iidfile != "" {
				// Never through a symlink a sandbox may have planted.
				if err := atomicfile.WriteOutput(iidfile, strings.NewReader(res.ID), 0o644); err != nil {
					return &exitError{code: 1, err: fmt.Errorf("build --iidfile: %w", err)}
				}
			}
			if quiet {
				fmt.Fprintln(cmd.OutOrStdout(), res.ID)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Successfully built %s\n", strings.TrimPrefix(res.ID, "sha256:")[:12])
			for _, t := range res.Tags {
				fmt.Fprintf(cmd.OutOrStdout(), "Successfully tagged %s\n", t)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVarP(&o.Tags, "tag", "t", nil, "name the image (repeatable)")
	f.StringVarP(&dockerfile, "file", "f", "", "Dockerfile path inside the context (default: Dockerfile)")
	f.StringArrayVar(&args, "build-arg", nil, "set a build arg K=V (K alone: from the environment)")
	f.StringVar(&o.Target, "target", "", "build this stage")
	f.BoolVar(&o.NoCache, "no-cache", false, "do not use the build cache")
	f.BoolVar(&o.Pull, "pull", false, "pull base images even when they are in the store")
	f.StringVar(&o.Network, "network", "", "network of RUN steps: none, host or bridge (default: bridge where it works)")
	f.StringArrayVar(&labels, "label", nil, "add a label K=V")
	f.StringArrayVar(&o.CacheFrom, "cache-from", nil, "reuse steps of this image (repeatable; the local cache is then not used)")
	f.StringArrayVar(&o.ExtraHosts, "add-host", nil, "add NAME:IP to RUN steps' /etc/hosts (repeatable)")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the image id")
	f.StringVar(&iidfile, "iidfile", "", "write the image id to this file")
	f.Bool("rm", true, "accepted: build steps are always removed")
	f.Bool("force-rm", false, "accepted: build steps are always removed")
	return c
}
