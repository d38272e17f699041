package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/lizard-build/lizard/client"
)

// table is what a list command prints: the JSON document for --json, else
// a header and rows, tab-separated, aligned.
type table struct {
	json   any
	header string
	rows   []string
}

// listCommand is `lizard <noun> list [--json]`: fetch asks the server,
// the rest (flags, usage, --json or an aligned table) is the same for
// every noun.
func listCommand(noun string, fetch func(context.Context, *client.Client) (table, error)) func(context.Context, Env, []string) error {
	return func(ctx context.Context, e Env, args []string) error {
		fs := NewFlags(e, noun+" list")
		cf := addClientFlags(fs)
		asJSON := fs.Bool("json", false, "print JSON")
		pos, err := ParseInterspersed(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return Usagef("usage: lizard %s list [--json]", noun)
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		t, err := fetch(ctx, c)
		if err != nil {
			return fmt.Errorf("listing %ss: %w", noun, err)
		}
		if *asJSON {
			return printJSON(e.Stdout, t.json)
		}
		tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, t.header)
		fmt.Fprint(tw, strings.Join(t.rows, ""))
		return tw.Flush()
	}
}
