package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/lizard-build/lizard/api"
)

func init() {
	snapshotCommands["list"] = subcommand{"list [--json]", snapshotList}
}

func snapshotList(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "snapshot list")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return Usagef("usage: lizard snapshot list [--json]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sns, err := c.ListSnapshots(ctx)
	if err != nil {
		return fmt.Errorf("listing snapshots: %w", err)
	}
	if *asJSON {
		return printJSON(e.Stdout, api.SnapshotList{Snapshots: sns})
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSANDBOX\tTEMPLATE\tCREATED\tSIZE")
	for _, sn := range sns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f MiB\n", sn.SnapshotID, sn.SandboxID, sn.Template, formatTime(&sn.CreatedAt), float64(sn.SizeBytes)/(1<<20))
	}
	return tw.Flush()
}
