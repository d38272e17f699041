package cli

import (
	"context"
	"errors"
	"fmt"
)

func init() {
	volumeCommands["delete"] = subcommand{"delete NAME...", volumeDelete}
}

func volumeDelete(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "volume delete")
	cf := addClientFlags(fs)
	names, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return Usagef("usage: lizard volume delete NAME...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if err := c.Volumes().Delete(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("deleting volume %s: %w", n, err))
			continue
		}
		fmt.Fprintln(e.Stdout, n)
	}
	return errors.Join(errs...)
}
