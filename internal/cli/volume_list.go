package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/lizard-build/lizard/api"
)

func init() {
	volumeCommands["list"] = subcommand{"list [--json]", volumeList}
}

func volumeList(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "volume list")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return Usagef("usage: lizard volume list [--json]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	vs, err := c.ListVolumes(ctx)
	if err != nil {
		return fmt.Errorf("listing volumes: %w", err)
	}
	if *asJSON {
		return printJSON(e.Stdout, api.VolumeList{Volumes: vs})
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tCREATED")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%d MiB\t%s\n", v.Name, v.VolumeID, v.SizeMb, formatTime(&v.CreatedAt))
	}
	return tw.Flush()
}
