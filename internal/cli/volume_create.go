package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
)

func init() {
	volumeCommands["create"] = subcommand{"create NAME [--size-mb N] [--json]", volumeCreate}
}

func volumeCreate(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "volume create")
	cf := addClientFlags(fs)
	size := fs.Int64("size-mb", 0, "size of the volume in MiB, enforced by its filesystem (default: the server's, 1024)")
	asJSON := fs.Bool("json", false, "print the volume as JSON instead of its name")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard volume create NAME [--size-mb N] [--json]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	v, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: pos[0], SizeMb: *size})
	if err != nil {
		return fmt.Errorf("creating volume %s: %w", pos[0], err)
	}
	if *asJSON {
		return printJSON(e.Stdout, v)
	}
	fmt.Fprintln(e.Stdout, v.Name)
	return nil
}
