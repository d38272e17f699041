package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/lizard-build/lizard/api"
)

func init() {
	register("attach", "reattach to a background process or terminal (its recent output first)", runAttach)
}

// runAttach is `lizard attach ID PID`: a terminal becomes this terminal
// again (Ctrl-] leaves it running); another process's output is replayed
// and followed. Either way it exits with the process's code.
func runAttach(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "attach")
	cf := addClientFlags(fs)
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return Usagef("usage: lizard attach SANDBOX PID")
	}
	id := pos[0]
	pid, err := strconv.Atoi(pos[1])
	if err != nil {
		return Usagef("PID %q is not a number (lizard ps %s lists them)", pos[1], id)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	p, err := c.GetProcess(ctx, id, pid)
	if err != nil {
		return fmt.Errorf("finding process %d in sandbox %s: %w", pid, id, err)
	}
	if p.Pty != nil && p.Running {
		code, err := runTerminal(ctx, e, c, id, pid)
		if err != nil {
			return err
		}
		return exitFor(code, "")
	}
	res, err := c.ConnectProcess(ctx, id, pid, func(ev api.ProcessOutputEvent) {
		switch ev.Type {
		case api.EventStdout:
			io.WriteString(e.Stdout, ev.Text)
		case api.EventStderr:
			io.WriteString(e.Stderr, ev.Text)
		case api.OutputPty:
			e.Stdout.Write(ev.Data)
		case api.OutputDropped:
			fmt.Fprintf(e.Stderr, "[lizard: %d bytes of output dropped]\n", ev.Dropped)
		}
	})
	if err != nil {
		return fmt.Errorf("following process %d in sandbox %s: %w", pid, id, err)
	}
	return exitFor(res.ExitCode, res.Error)
}
