package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/template"
)

// ensureTemplate is template.Ensure; tests replace it so that they need not
// build a root filesystem.
var ensureTemplate = template.Ensure

type templateBuildArgs struct {
	cacheDir, name string
}

func parseTemplateBuild(e cli.Env, args []string) (*templateBuildArgs, error) {
	fs := cli.NewFlags(e, "admin build-template")
	a := &templateBuildArgs{}
	fs.StringVar(&a.cacheDir, "cache-dir", template.DefaultCacheDir, "template cache directory, shared by every data directory")
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	switch len(pos) {
	case 0:
		a.name = template.Default
	case 1:
		a.name = pos[0]
	default:
		return nil, cli.Usagef("usage: lizard admin build-template [--cache-dir D] [NAME]")
	}
	if !slices.Contains(template.Names(), a.name) {
		return nil, cli.Usagef("unknown built-in template %q: want one of %s (a custom template is built from a recipe through the API: lizard template build -f RECIPE.yaml --name NAME)", a.name, strings.Join(template.Names(), ", "))
	}
	return a, nil
}

// adminBuildTemplate is `lizard admin build-template [--cache-dir D] [NAME]`:
// a built-in template's root filesystem built here, on the server's machine,
// without a server (make template, or ahead of a node's first start). It is
// an admin verb rather than a `lizard template` one so that `lizard template`
// stays the client's single command, parsed once, on every binary.
func adminBuildTemplate(ctx context.Context, e cli.Env, args []string) error {
	a, err := parseTemplateBuild(e, args)
	if err != nil {
		return err
	}
	// Progress goes to stderr so that stdout is only the path, for scripts.
	rootfs, err := ensureTemplate(ctx, a.cacheDir, a.name, e.Stderr)
	if err != nil {
		return fmt.Errorf("building template %s: %w", a.name, err)
	}
	fmt.Fprintln(e.Stdout, rootfs)
	return nil
}
