package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
)

func init() {
	register("start", "start a background process in a sandbox; prints its pid", runStart)
}

// runStart is `lizard start [flags] SANDBOX -- CMD ARGS...`: exec's
// arguments, but the command runs on in the background (lizard attach,
// lizard ps, lizard kill-process find it again).
func runStart(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "start")
	cf := addClientFlags(fs)
	envs := kvFlag{}
	var timeout durationFlag
	var req struct{ cwd, tag string }
	fs.StringVar(&req.cwd, "cwd", "", "working directory (default /home/user)")
	fs.StringVar(&req.tag, "tag", "", "a name for the process, listed by lizard ps")
	fs.Var(envs, "env", "environment variable K=V (repeatable)")
	fs.Var(&timeout, "timeout", "kill the command after this long, such as 30m (default: no limit)")
	if err := Parse(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return Usagef("usage: lizard start [flags] SANDBOX -- CMD ARGS...")
	}
	id, rest := rest[0], rest[1:]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return Usagef("no command to start: lizard start [flags] SANDBOX -- CMD ARGS...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r := api.ProcessStartRequest{Args: rest, Cwd: req.cwd, Tag: req.tag, TimeoutMs: timeout.ms}
	if len(envs) > 0 {
		r.Envs = envs
	}
	p, err := c.StartProcess(ctx, id, r)
	if err != nil {
		return fmt.Errorf("starting a process in sandbox %s: %w", id, err)
	}
	fmt.Fprintln(e.Stdout, p.Pid)
	return nil
}
