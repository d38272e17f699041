package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
)

func init() {
	snapshotCommands["get"] = subcommand{"get ID [--json]", snapshotGet}
}

func snapshotGet(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "snapshot get")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	id, err := parseID(fs, args, "lizard snapshot get ID [--json]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sn, err := c.Snapshots().Get(ctx, id)
	if err != nil {
		return fmt.Errorf("getting snapshot %s: %w", id, err)
	}
	if *asJSON {
		return printJSON(e.Stdout, sn)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t%s\n", sn.SnapshotID)
	fmt.Fprintf(tw, "SANDBOX\t%s\n", sn.SandboxID)
	fmt.Fprintf(tw, "PROJECT\t%s\n", sn.ProjectID)
	fmt.Fprintf(tw, "TEMPLATE\t%s\n", sn.Template)
	fmt.Fprintf(tw, "CREATED\t%s\n", formatTime(&sn.CreatedAt))
	fmt.Fprintf(tw, "SIZE\t%d bytes\n", sn.SizeBytes)
	return tw.Flush()
}
