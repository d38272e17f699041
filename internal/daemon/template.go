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
	fs := cli.NewFlags(e, "template build")
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
		return nil, cli.Usagef("usage: lizard template build [--cache-dir D] [NAME]")
	}
	if !slices.Contains(template.Names(), a.name) {
		return nil, cli.Usagef("unknown built-in template %q: want one of %s (a custom template is built from a recipe: lizard template build -f RECIPE.yaml --name NAME)", a.name, strings.Join(template.Names(), ", "))
	}
	return a, nil
}

// runTemplate is `lizard template build [--cache-dir D] [NAME]`, which
// builds a built-in template's root filesystem here, without a server;
// every other use of `lizard template` (custom templates through the API:
// build -f, list, get, delete) is the client's.
func runTemplate(ctx context.Context, e cli.Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if err := cli.RunTemplate(ctx, e, args); err != nil {
			return err
		}
		fmt.Fprintln(e.Stdout, "\nOn the server's machine: lizard template build [--cache-dir D] [NAME] builds a built-in template's")
		fmt.Fprintln(e.Stdout, "root filesystem into the template cache. Built-in templates: "+strings.Join(template.Names(), ", "))
		return nil
	}
	if args[0] != "build" || slices.ContainsFunc(args[1:], func(a string) bool {
		for _, flag := range []string{"f", "name", "quiet", "json", "api-url", "api-key"} {
			if a == "-"+flag || a == "--"+flag || strings.HasPrefix(a, "-"+flag+"=") || strings.HasPrefix(a, "--"+flag+"=") {
				return true
			}
		}
		return false
	}) {
		return cli.RunTemplate(ctx, e, args)
	}
	a, err := parseTemplateBuild(e, args[1:])
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
