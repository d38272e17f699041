package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/lizard-build/lizard/api"
)

func init() {
	secretCommands["set"] = subcommand{"set NAME --host HOST... [--allow-http] [--json]   (the value on stdin, or at a prompt)", secretSet}
}

// secretSet reads the value from stdin, or from a prompt without echo
// when stdin is a terminal. Never from argv: the command line is in
// shell histories and in every process listing on the machine.
func secretSet(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "secret set")
	cf := addClientFlags(fs)
	var hosts listFlag
	fs.Var(&hosts, "host", "a name or *.wildcard the secret may be sent to (repeatable; required): policies may inject it for these alone")
	allowHTTP := fs.Bool("allow-http", false, "let it go to those hosts over plain HTTP too, in the clear (default: HTTPS only)")
	asJSON := fs.Bool("json", false, "print the secret's name, hosts and times as JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard secret set NAME --host HOST..., the value on stdin (printf %%s \"$TOKEN\" | lizard secret set NAME --host api.example.com) or at the prompt")
	}
	if len(hosts.vals) == 0 {
		return Usagef("lizard secret set %s: give the hosts it may be sent to, --host api.example.com (repeatable, *.wildcards allowed): policies may inject it for these alone", pos[0])
	}
	value, err := readSecretValue(e, stdin)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	s, err := c.Secrets().Set(ctx, pos[0], api.SetSecretRequest{Value: value, Hosts: hosts.vals, AllowHTTP: *allowHTTP})
	if err != nil {
		return fmt.Errorf("setting secret %s: %w", pos[0], err)
	}
	if *asJSON {
		return printJSON(e.Stdout, s)
	}
	fmt.Fprintf(e.Stdout, "%s (hosts: %s)\n", s.Name, strings.Join(s.Hosts, ", "))
	return nil
}

// readSecretValue reads all of in, less one trailing newline (what echo
// and files end with, which no header value may hold); at a terminal it
// prompts on stderr and reads one line without echo.
func readSecretValue(e Env, in io.Reader) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(e.Stderr, "Value (not shown): ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.Stderr)
		if err != nil {
			return "", fmt.Errorf("reading the value: %w", err)
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(in, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the value from stdin: %w", err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", Usagef("no value on stdin: pipe it in (printf %%s \"$TOKEN\" | lizard secret set NAME)")
	}
	return v, nil
}
