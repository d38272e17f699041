package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	snapshotCommands["list"] = subcommand{"list [--json]", listCommand("snapshot", func(ctx context.Context, c *client.Client) (table, error) {
		sns, err := c.Snapshots().List(ctx)
		t := table{json: api.SnapshotList{Snapshots: sns}, header: "ID\tSANDBOX\tTEMPLATE\tCREATED\tSIZE"}
		for _, sn := range sns {
			t.rows = append(t.rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%.1f MiB\n", sn.SnapshotID, sn.SandboxID, sn.Template, formatTime(&sn.CreatedAt), float64(sn.SizeBytes)/(1<<20)))
		}
		return t, err
	})}
}
