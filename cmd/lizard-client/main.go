// Command lizard-client is the lizard CLI without the server: only the
// commands that talk to the API. Every sandbox gets it as
// /usr/local/bin/lizard, so that code inside can use its lizardToken; it
// links no server code (internal/cli/deps_test.go).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lizard-build/lizard/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !cli.Silent(err) {
			fmt.Fprintln(os.Stderr, "lizard:", err)
		}
		os.Exit(cli.ExitCode(err))
	}
}
