package cli

import (
	"context"
	"errors"
	"fmt"
)

func init() {
	snapshotCommands["delete"] = subcommand{"delete ID...", snapshotDelete}
}

func snapshotDelete(ctx context.Context, e env, args []string) error {
	fs := newFlags(e, "snapshot delete")
	cf := addClientFlags(fs)
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("usage: lizard snapshot delete ID...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := c.DeleteSnapshot(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("deleting snapshot %s: %w", id, err))
			continue
		}
		fmt.Fprintln(e.stdout, id)
	}
	return errors.Join(errs...)
}
