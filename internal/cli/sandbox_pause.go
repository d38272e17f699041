package cli

import (
	"context"
	"fmt"
)

func init() {
	sandboxCommands["pause"] = subcommand{"pause ID...   (checkpoint to disk and stop; any call resumes it)", sandboxPause}
	sandboxOrder = append(sandboxOrder, "pause")
}

func sandboxPause(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox pause")
	cf := addClientFlags(fs)
	ids, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return Usagef("usage: lizard sandbox pause ID...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	for _, id := range ids {
		sb, err := c.PauseSandbox(ctx, id)
		if err != nil {
			return fmt.Errorf("pausing sandbox %s: %w", id, err)
		}
		fmt.Fprintf(e.Stdout, "%s %s\n", sb.SandboxID, sb.State)
	}
	return nil
}
