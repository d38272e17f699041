package cli

import (
	"context"
	"fmt"
	"io"
)

func init() {
	register("secret", "set, list and remove the project's secrets, injected into sandboxes' requests by their network policy", runSecret)
}

// secretCommands are filled by the secret_*.go files.
var secretCommands = map[string]subcommand{}

var secretOrder = []string{"set", "list", "rm"}

func secretUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: lizard secret COMMAND [ARGS]\n\nCommands:")
	for _, n := range secretOrder {
		fmt.Fprintf(w, "  lizard secret %s\n", secretCommands[n].usage)
	}
	fmt.Fprintln(w, "\nA value is read from standard input (or typed at a prompt), never from the command line,")
	fmt.Fprintln(w, "and no command shows it again. A sandbox's network policy injects it (docs/secrets.md), only into")
	fmt.Fprintln(w, "requests to the hosts it was set with (--host, required), and over HTTPS unless --allow-http.")
	fmt.Fprintln(w, "They need a project key: a sandbox's own key (lizardToken) may not set, list or remove them.")
	fmt.Fprintln(w, "Every command takes --api-url and --api-key (default $LIZARD_API_URL, $LIZARD_API_KEY).")
}

func runSecret(ctx context.Context, e Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		secretUsage(e.Stdout)
		return nil
	}
	sub, ok := secretCommands[args[0]]
	if !ok {
		secretUsage(e.Stderr)
		return Usagef("unknown secret command %q", args[0])
	}
	return sub.run(ctx, e, args[1:])
}
