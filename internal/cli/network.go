package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	register("network", "show, set or clear the project's default network policy (docs/network.md)", runNetwork)
}

const networkDefaultUsage = "default [--allow-domain D]... [--deny-domain D]... [--network-default allow|deny] | --clear   [--json]"

func runNetwork(ctx context.Context, e Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.Stdout, "Usage: lizard network %s\n\n", networkDefaultUsage)
		fmt.Fprintln(e.Stdout, "Without flags it shows the project's default network policy, that of its sandboxes created")
		fmt.Fprintln(e.Stdout, "without one; with policy flags it replaces it; --clear returns them to the server's.")
		fmt.Fprintln(e.Stdout, "Every command takes --api-url and --api-key (default $LIZARD_API_URL, $LIZARD_API_KEY).")
		return nil
	}
	if args[0] != "default" {
		return Usagef("unknown network command %q; usage: lizard network %s", args[0], networkDefaultUsage)
	}
	return networkDefault(ctx, e, args[1:])
}

func networkDefault(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "network default")
	cf := addClientFlags(fs)
	var nf networkFlags
	fs.Var(&nf.allow, "allow-domain", "a name, *.wildcard or IPv4 prefix to allow (repeatable)")
	fs.Var(&nf.deny, "deny-domain", "a name, *.wildcard or IPv4 prefix to deny (repeatable)")
	fs.StringVar(&nf.def, "network-default", "", "allow or deny: what names no rule names get (default allow)")
	clear := fs.Bool("clear", false, "remove the project's default: its sandboxes get the server's")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || (*clear && nf.given()) {
		return Usagef("usage: lizard network %s", networkDefaultUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var pol *api.NetworkPolicy
	switch {
	case *clear:
		if err := c.Network().Clear(ctx); err != nil {
			return fmt.Errorf("clearing the project's default network policy: %w", err)
		}
		fmt.Fprintln(e.Stdout, "cleared: the project's sandboxes created without a policy get the server's")
		return nil
	case nf.given():
		if pol, err = c.Network().Set(ctx, *nf.policy()); err != nil {
			return fmt.Errorf("setting the project's default network policy: %w", err)
		}
	default:
		pol, err = c.Network().Get(ctx)
		if errors.Is(err, client.ErrNotFound) {
			fmt.Fprintln(e.Stdout, "the project has no default network policy: its sandboxes created without one get the server's")
			return nil
		}
		if err != nil {
			return fmt.Errorf("getting the project's default network policy: %w", err)
		}
	}
	if *asJSON {
		return printJSON(e.Stdout, pol)
	}
	fmt.Fprintf(e.Stdout, "default: %s\nallow:   %s\ndeny:    %s\n", pol.Default, strings.Join(pol.Allow, " "), strings.Join(pol.Deny, " "))
	return nil
}
