package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	volumeCommands["list"] = subcommand{"list [--json]", listCommand("volume", func(ctx context.Context, c *client.Client) (table, error) {
		vs, err := c.Volumes().List(ctx)
		t := table{json: api.VolumeList{Volumes: vs}, header: "NAME\tID\tSIZE\tCREATED"}
		for _, v := range vs {
			t.rows = append(t.rows, fmt.Sprintf("%s\t%s\t%d MiB\t%s\n", v.Name, v.VolumeID, v.SizeMb, formatTime(&v.CreatedAt)))
		}
		return t, err
	})}
}
