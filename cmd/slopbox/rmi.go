package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/image"
)

func rmiCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "rmi [flags] IMAGE...",
		Short: "Remove images",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			var errs []error
			for _, ref := range args {
				remove := s.Remove
				if force {
					remove = s.ForceRemove // in use: the name goes, the layers stay
				}
				names, err := remove(ref)
				if err != nil {
					if force && errors.Is(err, image.ErrNotFound) {
						continue
					}
					errs = append(errs, err)
					continue
				}
				for _, n := range names {
					fmt.Println("Untagged:", n)
				}
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "remove the name even while sandboxes use the image (they keep its layers); ignore images that do not exist")
	return c
}
