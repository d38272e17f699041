package cli

import (
	"context"
	"errors"
	"fmt"
)

func init() {
	secretCommands["rm"] = subcommand{"rm NAME...", secretRm}
}

func secretRm(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "secret rm")
	cf := addClientFlags(fs)
	names, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return Usagef("usage: lizard secret rm NAME...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if err := c.Secrets().Delete(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("removing secret %s: %w", n, err))
			continue
		}
		fmt.Fprintln(e.Stdout, n)
	}
	return errors.Join(errs...)
}
