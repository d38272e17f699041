package cli

import (
	"context"
	"fmt"
	"io"
)

func init() {
	register("snapshot", "list, inspect and delete snapshots (take them with the API or SDKs)", runSnapshot)
}

// snapshotCommands are filled by the snapshot_*.go files.
var snapshotCommands = map[string]subcommand{}

var snapshotOrder = []string{"list", "get", "delete"}

func snapshotUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: lizard snapshot COMMAND [ARGS]\n\nCommands:")
	for _, n := range snapshotOrder {
		fmt.Fprintf(w, "  lizard snapshot %s\n", snapshotCommands[n].usage)
	}
	fmt.Fprintln(w, "\nCreate a sandbox from one with the API (snapshotId); fork with `lizard sandbox fork`.")
	fmt.Fprintln(w, "Every command takes --api-url and --api-key (default $LIZARD_API_URL, $LIZARD_API_KEY).")
}

func runSnapshot(ctx context.Context, e Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		snapshotUsage(e.Stdout)
		return nil
	}
	sub, ok := snapshotCommands[args[0]]
	if !ok {
		snapshotUsage(e.Stderr)
		return Usagef("unknown snapshot command %q", args[0])
	}
	return sub.run(ctx, e, args[1:])
}
