package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/dockercompat/service"
)

func inspectCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "inspect IMAGE...",
		Short: "Show sandbox or image metadata as JSON",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			var out []any
			var errs []error
			for _, ref := range args {
				if sb, err := b.Open(ref); err == nil {
					out = append(out, service.Inspect(sb.Info()))
					continue
				}
				d, err := b.Store().Inspect(ref)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, service.ImageInspectOf(d))
			}
			if format != "" {
				if err := formatEach(format, out); err != nil {
					return err
				}
			} else {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "    ")
				if out == nil {
					out = []any{}
				}
				if err := enc.Encode(out); err != nil {
					return err
				}
			}
			if len(errs) > 0 {
				return &exitError{code: 1, err: errors.Join(errs...)}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&format, "format", "f", "", "Go template over each object's JSON fields (e.g. '{{.Id}} {{.Pid}}'); json renders a value as JSON")
	return c
}

// formatEach prints each object through the Go template text, over its
// JSON form as docker inspect --format does, one line each.
func formatEach(text string, objs []any) error {
	tmpl, err := template.New("format").Funcs(template.FuncMap{"json": jsonString}).Parse(text)
	if err != nil {
		return &exitError{code: 125, err: fmt.Errorf("--format: %w", err)}
	}
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return err
		}
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber() // 1048576, not 1.048576e+06
		if err := d.Decode(&m); err != nil {
			return err
		}
		if err := tmpl.Execute(os.Stdout, m); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("--format: %w", err)}
		}
		fmt.Println()
	}
	return nil
}

// portCmd is docker port: the sandbox's published ports, or where one
// container port is published.
func portCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "port SANDBOX [CONTAINERPORT[/PROTO]]",
		Short: "List a sandbox's published ports",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			sb, err := b.Open(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			i := sb.Info()
			found := false
			for _, p := range i.Ports {
				key := fmt.Sprintf("%d/%s", p.ContainerPort, p.Protocol)
				if len(args) == 2 && args[1] != key && args[1] != strconv.Itoa(p.ContainerPort) {
					continue
				}
				if !i.Running {
					continue
				}
				found = true
				host := net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort))
				if len(args) == 2 {
					fmt.Println(host)
				} else {
					fmt.Printf("%s -> %s\n", key, host)
				}
			}
			if len(args) == 2 && !found {
				return &exitError{code: 1, err: fmt.Errorf("no public port '%s' published for %s", args[1], args[0])}
			}
			return nil
		},
	}
}
