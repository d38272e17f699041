// Command lizard is the Lizard server (`lizard serve`, `admin`, `template`)
// and its command-line client.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, daemon.Commands()...); err != nil {
		if !cli.Silent(err) {
			fmt.Fprintln(os.Stderr, "lizard:", err)
		}
		os.Exit(cli.ExitCode(err))
	}
}
