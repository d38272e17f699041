package cli

import (
	"context"
	"fmt"
	"strconv"
)

func init() {
	register("kill-process", "send a signal to a background process (default TERM)", runKillProcess)
}

// runKillProcess is `lizard kill-process ID PID [--signal S]`.
func runKillProcess(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "kill-process")
	cf := addClientFlags(fs)
	sig := fs.String("signal", "TERM", "signal name (TERM, INT, KILL, HUP, USR1...) or number")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return Usagef("usage: lizard kill-process SANDBOX PID [--signal S]")
	}
	pid, err := strconv.Atoi(pos[1])
	if err != nil {
		return Usagef("PID %q is not a number (lizard ps %s lists them)", pos[1], pos[0])
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if err := c.Signal(ctx, pos[0], pid, *sig); err != nil {
		return fmt.Errorf("signalling process %d in sandbox %s: %w", pid, pos[0], err)
	}
	return nil
}
