package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/lizard-build/lizard/client"
)

func init() {
	sandboxCommands["screenshot"] = subcommand{"screenshot ID -o FILE.png [--region X,Y,W,H]   (a desktop sandbox's screen as PNG; -o - for stdout)", sandboxScreenshot}
	sandboxOrder = append(sandboxOrder, "screenshot")
}

func sandboxScreenshot(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox screenshot")
	cf := addClientFlags(fs)
	out := fs.String("o", "", "the PNG file to write (- for stdout)")
	region := fs.String("region", "", "only this part of the screen: X,Y,WIDTH,HEIGHT in pixels")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		return Usagef("usage: lizard sandbox screenshot ID -o FILE.png [--region X,Y,W,H]")
	}
	var r *client.Region
	if *region != "" {
		r = new(client.Region)
		if n, err := fmt.Sscanf(*region, "%d,%d,%d,%d", &r.X, &r.Y, &r.Width, &r.Height); err != nil || n != 4 {
			return Usagef("--region %q: want X,Y,WIDTH,HEIGHT, such as 0,0,640,480", *region)
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	png, err := c.Desktop().Screenshot(ctx, pos[0], r)
	if err != nil {
		return fmt.Errorf("taking a screenshot of sandbox %s: %w", pos[0], err)
	}
	if *out == "-" {
		_, err = e.Stdout.Write(png)
		return err
	}
	if err := os.WriteFile(*out, png, 0o644); err != nil {
		return fmt.Errorf("writing the screenshot: %w", err)
	}
	fmt.Fprintf(e.Stderr, "%s: %d bytes\n", *out, len(png))
	return nil
}
