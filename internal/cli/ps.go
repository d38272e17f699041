package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	register("ps", "list a sandbox's background processes and terminals", runPs)
}

// runPs is `lizard ps ID [--json]`.
func runPs(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "ps")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard ps SANDBOX [--json]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ps, err := c.ListProcesses(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("listing processes of sandbox %s: %w", pos[0], err)
	}
	if *asJSON {
		return printJSON(e.Stdout, ps)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tTAG\tSTATUS\tTTY\tSTARTED\tCOMMAND")
	for _, p := range ps {
		status := "running"
		if !p.Running && p.ExitCode != nil {
			status = "exited " + strconv.Itoa(*p.ExitCode)
		}
		tty := "-"
		if p.Pty != nil {
			tty = fmt.Sprintf("%dx%d", p.Pty.Cols, p.Pty.Rows)
		}
		command := p.Cmd
		if command == "" {
			command = strings.Join(p.Args, " ")
		}
		tag := p.Tag
		if tag == "" {
			tag = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.Pid, tag, status, tty, p.StartedAt.Local().Format(time.DateTime), command)
	}
	return tw.Flush()
}
