package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/internal/version"
)

func init() {
	register("version", "print this binary's version (also -v, --version); GET /v1/health names the server's", runVersion)
}

// runVersion is `lizard version`, `lizard -v` and `lizard --version`.
func runVersion(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "version")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("lizard version takes no arguments, got %q", fs.Args())
	}
	fmt.Fprintln(e.Stdout, version.Line("lizard"))
	return nil
}
