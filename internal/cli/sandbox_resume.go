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

func sandboxResume(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox resume")
	cf := addClientFlags(fs)
	var timeout durationFlag
	fs.Var(&timeout, "timeout", "new timeout from now (0 = never expires); default the time left when paused")
	id, err := parseID(fs, args, "lizard sandbox resume ID [--timeout D]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{TimeoutMs: timeout.ms})
	if err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	fmt.Fprintf(e.Stdout, "%s %s, expires %s\n", sb.SandboxID, sb.State, expires(*sb))
	return nil
}
