package cli

import (
	"context"
	"errors"
	"fmt"
)

func init() {
	snapshotCommands["delete"] = subcommand{"delete ID...", snapshotDelete}
}

func snapshotDelete(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "snapshot delete")
	cf := addClientFlags(fs)
	ids, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return Usagef("usage: lizard snapshot delete ID...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := c.Snapshots().Delete(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("deleting snapshot %s: %w", id, err))
			continue
		}
		fmt.Fprintln(e.Stdout, id)
	}
	return errors.Join(errs...)
}
