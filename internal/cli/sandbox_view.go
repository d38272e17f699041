package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/lizard-build/lizard/api"
)

func init() {
	sandboxCommands["view"] = subcommand{"view ID [--control] [--ttl 1h] [--websocket] [--json]   (a new viewer of a desktop sandbox's stream: its URL; docs/desktop.md)", sandboxView}
	sandboxOrder = append(sandboxOrder, "view")
}

// sandboxView starts a desktop sandbox's stream and prints a new viewer's
// URL, which carries the viewer's own token: view-only unless --control.
func sandboxView(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox view")
	cf := addClientFlags(fs)
	control := fs.Bool("control", false, "let the viewer move the mouse and type (default: view-only)")
	ttl := fs.Duration("ttl", time.Hour, "how long the viewer's token opens the stream (1s to 24h)")
	websocket := fs.Bool("websocket", false, "print the stream's WebSocket URL (RFB, for noVNC or a VNC client) instead of the console's live view")
	asJSON := fs.Bool("json", false, "print the viewer as JSON (its token, id, expiry and both URLs)")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard sandbox view ID [--control] [--ttl 1h] [--websocket] [--json]")
	}
	if *ttl < time.Second || *ttl > 24*time.Hour {
		return Usagef("--ttl %v: want 1s to 24h", *ttl)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	v, err := c.Desktop().StartStream(ctx, pos[0], api.DesktopStreamRequest{Control: *control, TTLSeconds: int(*ttl / time.Second)})
	if err != nil {
		return fmt.Errorf("starting the stream of sandbox %s: %w", pos[0], err)
	}
	switch {
	case *asJSON:
		return printJSON(e.Stdout, v)
	case *websocket:
		fmt.Fprintln(e.Stdout, v.WebSocketURL)
	default:
		fmt.Fprintln(e.Stdout, v.URL)
	}
	return nil
}
