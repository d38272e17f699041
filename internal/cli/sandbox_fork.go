package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
)

func init() {
	sandboxCommands["fork"] = subcommand{"fork ID [--count N] [--timeout 5m|0] [--metadata K=V]... [--json]", sandboxFork}
	sandboxOrder = append(sandboxOrder, "fork")
}

func sandboxFork(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox fork")
	cf := addClientFlags(fs)
	count := fs.Int("count", 1, "how many forks (at most 16)")
	var timeout durationFlag
	fs.Var(&timeout, "timeout", "each fork's timeout (0 = never expires); default the server's")
	meta := kvFlag{}
	fs.Var(&meta, "metadata", "K=V metadata of each fork (repeatable)")
	asJSON := fs.Bool("json", false, "print JSON")
	id, err := parseID(fs, args, "lizard sandbox fork ID [--count N]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sbs, err := c.Fork(ctx, id, api.ForkRequest{Count: *count, Metadata: meta, TimeoutMs: timeout.ms})
	if err != nil {
		return fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	if *asJSON {
		return printJSON(e.Stdout, api.SandboxList{Sandboxes: sbs})
	}
	for _, sb := range sbs {
		fmt.Fprintln(e.Stdout, sb.SandboxID)
	}
	return nil
}
