package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

func init() {
	secretCommands["set"] = subcommand{"set NAME [--json]   (the value on stdin, or at a prompt)", secretSet}
}

// secretSet reads the value from stdin, or from a prompt without echo
// when stdin is a terminal. Never from argv: the command line is in
// shell histories and in every process listing on the machine.
func secretSet(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "secret set")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the secret's name and times as JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard secret set NAME, the value on stdin (printf %%s \"$TOKEN\" | lizard secret set NAME) or at the prompt")
	}
	value, err := readSecretValue(e, stdin)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	s, err := c.SetSecret(ctx, pos[0], value)
	if err != nil {
		return fmt.Errorf("setting secret %s: %w", pos[0], err)
	}
	if *asJSON {
		return printJSON(e.Stdout, s)
	}
	fmt.Fprintln(e.Stdout, s.Name)
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
