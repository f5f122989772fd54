package main

import (
	"fmt"
	"os"
	"runtime"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/dockercompat/engine"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/userns"
)

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the slopbox version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Printf("slopbox version %s\n go: %s\n os/arch: %s/%s\n serve: Docker Engine API %s (as Docker %s), down to %s\n",
				version, runtime.Version(), runtime.GOOS, runtime.GOARCH, engine.APIVersion, engine.EngineVersion, engine.MinAPIVersion)
		},
	}
}

func infoCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "info",
		Short: "Show how slopbox runs on this host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := userns.Current()
			if err != nil {
				return err
			}
			cg := "v1 (hybrid)"
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				cg = "v2"
			}
			info := map[string]any{
				"Root":           globals.root,
				"Rootless":       os.Geteuid() != 0,
				"IDMapping":      m,
				"CgroupVersion":  cg,
				"Platform":       image.HostPlatform(),
				"ServerVersion":  version,
				"DefaultNetwork": "none",
			}
			if format != "" {
				// docker info --format '{{.ServerVersion}}' (rlm_code's health check).
				t, err := template.New("format").Option("missingkey=zero").Parse(format)
				if err != nil {
					return fmt.Errorf("--format: %w", err)
				}
				if err := t.Execute(os.Stdout, info); err != nil {
					return fmt.Errorf("--format: %w", err)
				}
				fmt.Println()
				return nil
			}
			printJSON(info)
			if m.Degraded {
				fmt.Fprintln(os.Stderr, "warning:", m.Warning)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&format, "format", "f", "", "print with a Go template, e.g. '{{.ServerVersion}}'")
	return c
}
