package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
)

func init() {
	sandboxCommands["resume"] = subcommand{"resume ID [--timeout 5m|0]   (default: the time it had left)", sandboxResume}
	sandboxOrder = append(sandboxOrder, "resume")
}

func sandboxResume(ctx context.Context, e env, args []string) error {
	fs := newFlags(e, "sandbox resume")
	cf := addClientFlags(fs)
	timeout := fs.String("timeout", "", "new timeout from now (0 = never expires); default the time left when paused")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return quietHelp(err)
	}
	if len(pos) != 1 {
		return usagef("usage: lizard sandbox resume ID [--timeout D]")
	}
	var req api.ResumeRequest
	if *timeout != "" {
		d, err := parseDuration(*timeout)
		if err != nil {
			return usagef("%v", err)
		}
		ms := d.Milliseconds()
		req.TimeoutMs = &ms
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.ResumeSandbox(ctx, pos[0], req)
	if err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", pos[0], err)
	}
	fmt.Fprintf(e.stdout, "%s %s, expires %s\n", sb.SandboxID, sb.State, expires(*sb))
	return nil
}
